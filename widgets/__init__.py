"""ipywidgets for LakeVilla: transaction widget and lakehouse inspector."""
