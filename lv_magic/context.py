"""What a magic command gets: the kernel state (connection, open transactions), the user namespace
and the magics' settings. No IPython objects: commands can be called and tested without a shell."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lv_magic.state import KernelState


@dataclass(frozen=True)
class MagicContext:
    state: KernelState
    user_ns: dict[str, Any] | None  # the shell's user namespace (None without a shell)
    default_preset: str = "serializable"
    default_retries: int = 0
    row_limit: int = 20
    out_limit: int = 1_000_000  # most rows --out loads into pandas (0: no limit)
    commit_wait_s: float = 0.5
    widgets: bool = True

    def require(self) -> Any:
        """The current Lakehouse (raises NotConnected before ``%lv connect``)."""
        return self.state.require()
