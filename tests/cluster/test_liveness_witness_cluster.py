"""Issue 27 (run G's two false positives): a broker that keeps fetching from the controller is
not fenced as frozen, even when the controller's pings to it go unanswered.

A real 3-broker cluster whose brokers reach each other only through one TCP proxy per
directed link (`yak.chaos.links`, the failover tests' proxies). The controller's liveness
probe of broker S dials S's inter-broker endpoint, so it crosses the link controller -> S;
S's replica fetchers dial the controller over the link S -> controller. Cutting only the
first ("drop": bytes vanish, the connections stay open) silences the probe while S goes on
fetching the partitions the controller leads: the run G situation, a live broker whose
answers to the probe wait, made with no hook in the broker. The third broker answers on,
so 2 of 3 brokers stand behind a silence verdict: before the witness the controller fenced
S about 2 s into the cut (test_liveness_partition.py's second case is the same cut in both
directions, where S stops fetching and is fenced).

Checked: no frozen verdict on S while the cut lasts (three bounds), one "verdict withheld"
line on the controller naming S, S's registration untouched; after the heal, the failover
checks (no acknowledged write lost, replicas byte-identical). About 30-45 s on a loaded
2-core machine: slow.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .failover import TOPIC, FailoverRun, wait_for

REGISTERED = "registered, epoch"
HOLD_S = 6.0  # three bounds of silence


def _log(run: FailoverRun, node: int) -> str:
    return run.cluster.brokers[node].log_path.read_text(errors="replace")


def _lines(run: FailoverRun, node: int, *needles: str) -> list[str]:
    return [ln for ln in _log(run, node).splitlines() if all(n in ln for n in needles)]


@pytest.mark.slow
def test_a_broker_that_fetches_is_not_fenced_when_its_pings_go_unanswered(
        tmp_path: Path) -> None:
    with FailoverRun(tmp_path, links=True, partitions=6,
                     settings={"broker.liveness.unresponsive.ms": "2000"}) as run:
        run.wait_acked(50)
        wait_for(lambda: run.controller() is not None, 30, "a controller")
        controller = run.controller()
        assert controller is not None
        led = [p for p, leader in run.leaders(TOPIC).items() if leader == controller]
        if not led:
            pytest.skip(f"controller {controller} leads none of {TOPIC}'s partitions:"
                        " no fetch to witness")
        suspect, third = (n for n in run.cluster.node_ids if n != controller)
        wait_for(lambda: _lines(run, controller, f"liveness: probing broker {suspect} ",
                                "a pinged connection"), 30, "the controller pinging S")
        wait_for(lambda: all(suspect in run.isr(p) for p in led), 30,
                 "S in the ISRs of the controller's partitions")
        time.sleep(1.0)  # a few answers on the probe's connection
        registered = _log(run, suspect).count(REGISTERED)

        assert run.links is not None
        run.links.cut(controller, suspect)  # the controller can no longer reach S
        wait_for(lambda: any(_lines(run, controller, f"liveness: broker {suspect} (", end)
                             for end in ("verdict withheld", "frozen; fenced")), 20,
                 "the controller's suspicion of S")
        time.sleep(HOLD_S)
        withheld = _lines(run, controller, f"liveness: broker {suspect} (", "verdict withheld")
        fenced = _lines(run, controller, f"liveness: broker {suspect} (", "frozen; fenced")
        print(f"\ncontroller {controller} -> S {suspect} cut; third {third};"
              f" withheld: {withheld}; fenced: {fenced}")
        assert not fenced, f"the controller fenced broker {suspect}, which was fetching"
        assert withheld  # once per suspicion (test_liveness_witness.py); a prober late
        # on a loaded host restarts its window, and so the suspicion, so not exactly one
        assert "fetched from this broker" in withheld[0]
        assert _log(run, suspect).count(REGISTERED) == registered
        assert all(suspect in run.isr(p) for p in led), "S left a controller-led ISR"

        run.links.heal()
        run.wait_isr_full(60)
        run.wait_acked(50)
        run.finish()
