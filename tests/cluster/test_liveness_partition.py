"""Issue 27 (run F): a broker cut off from the other brokers must not fence them.

A real 3-broker cluster whose brokers reach each other only through one TCP proxy per
link (`yak.chaos.links`, the failover tests' proxies); the liveness probes go through
them too, since they dial the same inter-broker endpoints. Clients and etcd are not
cut. With the frozen verdict on (`broker.liveness.unresponsive.ms` 2000, its default),
cutting one broker's links in both directions ("drop": bytes vanish, the connections
stay open) silences every probe that crosses the cut:

- the controller cut off hears neither peer: it must fence neither (before the second
  source, it fenced both, as in run F at 13:39:10). The two others suspect the
  controller together and fence it: the majority fences the minority;
- a non-controller cut off suspects the controller alone: no verdict on the controller
  (the controller, hearing the third broker, fences the cut one).

The healthy brokers keep their registrations throughout (one "registered, epoch" line
each), and the run ends with the failover checks: no acknowledged write lost, replicas
byte-identical once healed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .failover import FailoverRun, wait_for

REGISTERED = "registered, epoch"
HOLD_S = 6.0  # three bounds of silence


def _log(run: FailoverRun, node: int) -> str:
    return run.cluster.brokers[node].log_path.read_text(errors="replace")


def _verdicts(run: FailoverRun, prober: int, target: int) -> list[str]:
    return [line for line in _log(run, prober).splitlines() if "frozen; fenced" in line
            and (f"liveness: broker {target} (" in line
                 or f"liveness: controller {target} (" in line)]


def _cut(run: FailoverRun, node: int) -> None:
    assert run.links is not None
    for other in run.cluster.node_ids:
        if other != node:
            run.links.cut(node, other)
            run.links.cut(other, node)


def _registrations(run: FailoverRun) -> dict[int, int]:
    return {n: _log(run, n).count(REGISTERED) for n in run.cluster.node_ids}


def _pinging(run: FailoverRun, prober: int, target: int) -> bool:
    return (f"liveness: probing broker {target} " in _log(run, prober)
            and "a pinged connection" in _log(run, prober))


@pytest.mark.slow
def test_a_cut_off_broker_fences_nobody(tmp_path: Path) -> None:
    with FailoverRun(tmp_path, links=True,
                     settings={"broker.liveness.unresponsive.ms": "2000"}) as run:
        run.wait_acked(50)
        wait_for(lambda: run.controller() is not None, 30, "a controller")
        controller = run.controller()
        assert controller is not None
        others = [n for n in run.cluster.node_ids if n != controller]
        wait_for(lambda: all(_pinging(run, controller, n) and _pinging(run, n, controller)
                             for n in others), 30, "every probe pinging")
        time.sleep(1.0)  # a few answers on each connection
        before = _registrations(run)

        # 1. The controller cut off: it judges neither peer; they fence it together.
        _cut(run, controller)
        wait_for(lambda: any(_verdicts(run, n, controller) for n in others), 20,
                 "the other brokers fencing the cut-off controller")
        time.sleep(HOLD_S)
        print(f"\ncontroller {controller} cut off: its refusals"
              f" {[ln for ln in _log(run, controller).splitlines() if 'not judged' in ln]};"
              f" verdicts on it {[_verdicts(run, n, controller) for n in others]}")
        # (Whether its own bound comes before the others' verdict ends its term is a race
        # of a few ticks: its refusal is printed, and asserted by test_liveness_judge.py.)
        for n in others:
            assert not _verdicts(run, controller, n), f"the cut-off controller fenced {n}"
        assert all("suspected in etcd by brokers" in v for n in others
                   for v in _verdicts(run, n, controller))
        after = _registrations(run)
        assert all(after[n] == before[n] for n in others), (before, after)
        assert run.links is not None
        run.links.heal()
        run.wait_isr_full(60)
        run.wait_acked(50)

        # 2. A non-controller cut off: it suspects the controller alone, no verdict.
        wait_for(lambda: run.controller() is not None, 30, "a controller")
        controller = run.controller()
        assert controller is not None
        lone = next(n for n in run.cluster.node_ids if n != controller)
        third = next(n for n in run.cluster.node_ids if n not in (controller, lone))
        wait_for(lambda: _pinging(run, lone, controller)
                 and _log(run, lone).count(f"liveness: probing broker {controller} ") > 0,
                 30, "the lone prober pinging the controller")
        time.sleep(1.0)
        before = _registrations(run)
        refused = _log(run, lone).count("not judged")
        _cut(run, lone)
        # Its suspicion is refused: no majority (or, once the controller has fenced it, not
        # registered itself).
        wait_for(lambda: _log(run, lone).count("not judged") > refused, 20,
                 "the cut-off broker's unconfirmed suspicion")
        time.sleep(HOLD_S)
        assert not _verdicts(run, lone, controller), "a lone prober fenced the controller"
        after = _registrations(run)
        assert after[controller] == before[controller] and after[third] == before[third], \
            (before, after)
        run.links.heal()
        run.wait_isr_full(60)
        run.wait_acked(50)
        run.finish()
