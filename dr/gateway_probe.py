"""What `dr status` shows of a DR pair's gateways: for each, whether it answers and what it
serves, as its own /metrics says (`seaway_gateway_serving`, `_decision_epoch`, `_moving`,
`_decision_stale`, labelled with the pair).

Only shown, never judged: a gateway lags the decision by up to a second, an unreachable one
may be down on purpose, and neither says anything about whether the pair could fail over.
The timeout is short, so that a gateway that does not answer costs `dr status` little.
"""
from __future__ import annotations

from http.client import HTTPException

import anyio

from .config import GatewayAccess

TIMEOUT_S = 1.0


async def probe_gateways(gateways: list[GatewayAccess], pair: str, *, timeout_s: float = TIMEOUT_S) -> list[dict]:
    """One entry per gateway, in the configuration's order, each asked at the same time."""
    out: list[dict] = [{} for _ in gateways]

    async def one(i: int, gateway: GatewayAccess) -> None:
        out[i] = await probe_gateway(gateway, pair, timeout_s=timeout_s)
    async with anyio.create_task_group() as tg:
        for i, gateway in enumerate(gateways):
            tg.start_soon(one, i, gateway)
    return out


async def probe_gateway(gateway: GatewayAccess, pair: str, *, timeout_s: float = TIMEOUT_S) -> dict:
    seen = {"region": gateway.region, "bootstrap": gateway.bootstrap, "metrics_url": gateway.metrics,
            "reachable": False, "serving": None, "epoch": None, "stale": None, "moving": None, "error": None}
    try:
        with anyio.fail_after(timeout_s + 0.5):
            text = await anyio.to_thread.run_sync(_get, gateway.metrics, timeout_s, abandon_on_cancel=True)
    except (OSError, TimeoutError, HTTPException) as exc:     # HTTPException: not an HTTP server there
        seen["error"] = _reason(exc)
        return seen
    seen["reachable"] = True
    seen.update(served(text, pair))
    return seen


def served(text: str, pair: str) -> dict:
    """What a gateway's metrics say it serves for `pair`; `error` when it names no such pair
    (a gateway of another pair at that address) or the text is not Prometheus'."""
    from prometheus_client.parser import text_string_to_metric_families
    values: dict[str, float] = {}
    serving = None
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("pair") != pair:
                    continue
                if sample.name == "seaway_gateway_serving":
                    if sample.value == 1:
                        serving = sample.labels.get("cluster")
                else:
                    values[sample.name] = sample.value
    except ValueError as exc:
        return {"error": f"its metrics are not Prometheus text: {exc}"}
    if serving is None:
        return {"error": f"it serves no DR pair named {pair}"}
    return {"serving": serving, "epoch": int(values.get("seaway_gateway_decision_epoch", 0)),
            "stale": values.get("seaway_gateway_decision_stale") == 1,
            "moving": values.get("seaway_gateway_moving") == 1}


def describe(gateway: dict, active_cluster: str | None) -> str:
    """The line `dr status` prints for a gateway."""
    where = f"gateway {gateway['region']} {gateway['bootstrap']}"
    if not gateway["reachable"]:
        return f"{where}: unreachable ({gateway['error']})"
    if gateway["serving"] is None:
        return f"{where}: {gateway['error']}"
    decision = f"DR epoch {gateway['epoch']}" if gateway["epoch"] else "no DR decision yet"
    if gateway["stale"]:
        line = (f"{where}: serving {gateway['serving']}, the last decision it learnt ({decision}; "
                f"it cannot read the decision)")
    else:
        line = f"{where}: serving {gateway['serving']} ({decision})"
    if gateway["moving"]:
        line += ", moving its clients there"
    elif active_cluster is not None and gateway["serving"] != active_cluster and not gateway["stale"]:
        # Informational: a gateway follows the decision within about a second.
        line += f"; the topics are active in {active_cluster}"
    return line


def _get(url: str, timeout_s: float) -> str:
    from urllib.request import urlopen
    with urlopen(url, timeout=timeout_s) as answer:
        return answer.read(4 * 1024 * 1024).decode(errors="replace")


def _reason(exc: BaseException) -> str:
    from urllib.error import HTTPError
    if isinstance(exc, HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    reason = getattr(exc, "reason", None) or exc
    text = str(reason).strip() or type(reason).__name__
    return text.splitlines()[0][:160]
