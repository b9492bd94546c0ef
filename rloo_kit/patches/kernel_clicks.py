"""The one adapter between the live view's Stop button and a kernel that is busy running the training cell.

A Jupyter kernel handles a widget's messages on its main thread, which the training cell holds until it
ends: a click on Stop would wait for the run it is meant to stop. ipykernel 7 can run a *subshell*, a
second thread with its own message queue; routing the button's comm to one lets the click arrive while
the cell runs (the view then ends the run after the current step). This reaches into ipykernel's private
`SubshellManager._create_subshell` and the comm's `_reply_subshell_for`, so it is the registered patch
`ipykernel_subshell` (`rloo-kit doctor` lists it): where ipykernel is outside its tested versions, or
has no subshells, it declines and the view says to interrupt the kernel instead (the adapter is kept).
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("rloo_kit")

_SUBSHELL: dict[str, str] = {}  # one subshell per kernel process, shared by every view's button
CREATE_TIMEOUT_S = 10


def deliver_clicks_while_busy(widget) -> bool:
    """Route `widget`'s messages from the frontend to a kernel subshell, whose thread handles them while
    the main thread runs the training cell. False where that is not possible (no kernel, an older
    ipykernel, the patch declined), in which case a click waits for the cell to end."""
    try:
        from ipykernel.kernelbase import Kernel

        from . import allowed

        if not Kernel.initialized() or not allowed("ipykernel_subshell"):
            return False
        channel = getattr(Kernel.instance(), "shell_channel_thread", None)
        comm = getattr(widget, "comm", None)
        if channel is None or comm is None or not hasattr(comm, "_reply_subshell_for"):
            return False
        if "id" not in _SUBSHELL:
            subshell = _create_subshell(channel)
            if subshell is None:
                return False
            _SUBSHELL["id"] = subshell
        subshell = _SUBSHELL["id"]
        comm._reply_subshell_for = lambda data, default: subshell
        return True
    except Exception as e:  # a kernel without subshells: the click is handled after the cell
        log.debug("live view: clicks wait for the cell to end (%s)", e)
        return False


def _create_subshell(channel) -> str | None:
    """A new subshell's id, created on the shell channel's own event loop (where ipykernel expects it)."""
    done, box = threading.Event(), {}

    def create():
        try:
            box["id"] = channel.manager._create_subshell()
        finally:
            done.set()

    channel.io_loop.add_callback(create)
    return box.get("id") if done.wait(CREATE_TIMEOUT_S) else None
