"""IPython extension: %lv and %%lvtxn (see ARCHITECTURE.md)."""
