"""``%lv`` subcommands, one module per group; :mod:`lv_magic.router` maps command names to them.

Each command is ``f(ctx: MagicContext, rest: list[str]) -> None`` (``rest``: the tokens after the name).
"""
