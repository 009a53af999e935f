#!/usr/bin/env python3
"""Generates scenarios/driving-m2ho.toml and scenarios/walking-m2ho.toml (cell layouts with a
fixed random seed), the simulator part (a UE, a server, the radio link, a loaded UDP sender)
included. Run from the repository root: python3 crates/ran/tools/gen_m2ho_scenarios.py"""
import random

EVENTS = '''[[radio.rrc.events]]
id = 1                   # horizontal sub-6 handover
type = "A3"
offset_db = {off}
hysteresis_db = 1.0
time_to_trigger_ms = {ttt}
serving_types = ["nr_fr1"]
targets = ["nr_fr1"]
action = "handover"

[[radio.rrc.events]]
id = 2                   # horizontal mmWave handover
type = "A3"
offset_db = {off}
hysteresis_db = 1.0
time_to_trigger_ms = {ttt}
serving_types = ["nr_fr2"]
targets = ["nr_fr2"]
action = "handover"

[[radio.rrc.events]]
id = 3                   # vertical sub-6 -> mmWave once a mmWave cell is good (M2HO Alg. 1: A5;
type = "A5"              # threshold1 so high that only the mmWave cell's condition counts)
threshold1 = -30.0
threshold2 = {a4}
hysteresis_db = 2.0
time_to_trigger_ms = {ttt_up}
serving_types = ["nr_fr1"]
targets = ["nr_fr2"]
action = "handover"

[[radio.rrc.events]]
id = 4                   # vertical mmWave -> sub-6 when the mmWave cell degrades (M2HO Alg. 1: A2)
type = "A2"
threshold = {a2}
hysteresis_db = 2.0
time_to_trigger_ms = {ttt}
serving_types = ["nr_fr2"]
targets = ["nr_fr1"]
action = "handover"

[[radio.rrc.events]]
id = 5                   # the mmWave cell recovers: the network drops a handover it decided
type = "A1"              # on and has not commanded yet (cancel_on_a1; M2HO's fallback 1)
threshold = {a1}
hysteresis_db = 1.0
time_to_trigger_ms = 80
serving_types = ["nr_fr2"]
action = "none"

[[radio.rrc.events]]
id = 6                   # a weak sub-6 cell is reported but handed over by A3 only: reports
type = "A2"              # that are no handover (what HO-Naive mistakes for one)
threshold = {a2s}
hysteresis_db = 2.0
time_to_trigger_ms = {ttt}
report_interval_ms = 1024
report_amount = 4
serving_types = ["nr_fr1"]
action = "none"
'''

# Handover imperfections M2HO observed (Sec. 4.2, 6.3.1): cancelled handovers (A1 before the
# command) and mmWave radio link failures that fall back to sub-6 without any report.
IMPERFECTIONS = '''[radio.handover]
cancel_on_a1 = true
radio_link_failure = { qout_sinr_db = -8.0, t310_ms = 1000.0, rats = ["nr_fr2"] }

'''

# The simulator part: the UE host on a link bound to its radio path, a server, and a
# loaded sender (constant-rate UDP down to the UE).
SIM = '''name = "{name}"
description = "{description}"

[sim]
duration = "{duration}"        # tests run a shorter stretch
seed = 1
stop_when_done = false

[output]
bin = "1s"

[[host]]
name = "ue"
interfaces = [{{ name = "nr0", addr = "10.0.0.2", link = "nr", side = "a" }}]

[[host]]
name = "server"
interfaces = [{{ name = "eth0", addr = "10.0.0.1", link = "nr", side = "b" }}]

# Side a is the UE: `down` is the radio downlink (queued in the serving cell's buffer,
# served slot by slot), `up` the radio uplink; `delay` is the wired part, each way.
[[link]]
name = "nr"
radio = {{ ue = 0, iface = 0 }}
delay = "10ms"

# A loaded sender: {rate} down to the UE, more than a sub-6 cell gives towards its edge
# and less than a mmWave cell gives, so the cell buffers fill and drain and handovers find
# them loaded (M2HO finding 3: target-buffer overflow).
[[flow]]
name = "down"
kind = "cbr"
from = "server"
to = "ue"
rate = "{rate}"

'''

HEAD = '''[radio.measurement]
period_ms = 40
emit_every = 25

[radio.channel]
los = "stochastic"
shadowing = true

'''


# M2HO section 4.3: sub-6 cells with 0.5 ms slots and 106 RBs (40 MHz at 30 kHz); mmWave
# cells with 200 MHz at 120 kHz (132 RBs). Two MIMO layers each.
EXTRA = {
    "nr_fr1": "bandwidth_mhz = 40\nmimo_layers = 2\n",
    "nr_fr2": "bandwidth_mhz = 200\nmimo_layers = 2\n",
}


def cells_toml(cells, sub6_environment):
    """The cells' TOML; the sub-6 GHz grid's cells get the TR 38.901 scenario
    ``sub6_environment`` (``uma``: macro masts at 25 m; ``umi``: street-level small cells)."""
    env = {"nr_fr1": f'environment = "{sub6_environment}"\n', "nr_fr2": ""}
    return "\n".join(
        f'[[radio.cells]]\nid = {i}\ntype = "{t}"\nposition = [{x:.1f}, {y:.1f}]\n{env[t]}{EXTRA[t]}'
        for i, t, x, y in cells
    )


def along(route, spacing, off, rng, cid, typ):
    out = []
    for i in range(len(route)):
        (x0, y0), (x1, y1) = route[i], route[(i + 1) % len(route)]
        length = ((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5
        n = max(1, int(length // spacing))
        for k in range(n):
            f = (k + 0.5) / n
            x, y = x0 + f * (x1 - x0), y0 + f * (y1 - y0)
            o = rng.choice([-off, off])
            if x0 == x1:
                x += o
            else:
                y += o
            out.append((cid, typ, x, y))
            cid += 1
    return out, cid


def grid(isd, nx, ny, cid):
    out = []
    for gx in range(-1, nx):
        for gy in range(-1, ny):
            out.append((cid, "nr_fr1", gx * isd + (isd / 2 if gy % 2 else 0), gy * isd * 0.866))
            cid += 1
    return out, cid


def ue(points, speed):
    pts = ", ".join(f"[{x:.1f}, {y:.1f}]" for x, y in points)
    return f'''
[[radio.ues]]
id = 0
mobility = {{ type = "waypoints", points = [{pts}], speed_mps = {speed}, repeat = true }}

[[radio.ues.interfaces]]
name = "nr0"
kind = "cellular"
rats = ["nr_fr1", "nr_fr2"]
'''


def main():
    route = [(0, 0), (2000, 0), (2000, 1000), (0, 1000)]
    cells, cid = grid(650, 5, 3, 1)
    mm, _ = along(route, 450, 20, random.Random(7), cid, "nr_fr2")
    head = (
        "# A driving scenario in the spirit of M2HO's driving tests (the M2HO paper, section 3.3: a\n"
        "# handover every 9.2 s on average when driving): a 6 km loop at 12 m/s through a sub-6 GHz\n"
        "# macro grid (ISD 650 m, TR 38.901 UMa: 25 m masts, shadowing correlated over 37/50 m)\n"
        "# with mmWave small cells along the road (every ~450 m, UMi street canyon), stochastic LOS\n"
        "# and correlated shadow fading, M2HO's event logic (A3 horizontal, A5 to mmWave, A2 from\n"
        "# mmWave) with vehicular TTTs, M2HO's handover timing defaults, and the imperfections it\n"
        "# observed (cancelled handovers, mmWave radio link failures).\n"
        "# Generated by crates/ran/tools/gen_m2ho_scenarios.py; keys in crates/ran/README.md.\n\n"
    )
    ev = EVENTS.format(off=4.0, ttt=320, ttt_up=640, a4=-92.0, a2=-108.0, a1=-103.0, a2s=-100.0)
    preds = (
        '[[radio.predictors]]\nkind = "gbt"              # the bundled model trained on raca5g\n\n'
        '[[radio.predictors]]\nkind = "ewma"\nalpha = 0.3\n\n'
    )
    with open("scenarios/driving-m2ho.toml", "w") as f:
        sim = SIM.format(
            name="driving-m2ho",
            description="M2HO-style drive: 12 m/s loop, sub-6 grid and mmWave small cells, loaded UDP sender",
            duration="300s",
            rate="100Mbit/s",
        )
        f.write(head + sim + HEAD + IMPERFECTIONS + preds + ev + "\n" + cells_toml(cells + mm, "uma") + ue(route, 12.0))

    route = [(0, 0), (400, 0), (400, 300), (0, 300)]
    cells, cid = grid(300, 2, 2, 1)
    mm, _ = along(route, 60, 10, random.Random(11), cid, "nr_fr2")
    head = (
        "# A walking scenario in the spirit of M2HO's walking tests (the M2HO paper, section 3.3: a\n"
        "# handover every 22.1 s on average when walking): a 1.4 km loop at 1.4 m/s around a\n"
        "# downtown block with dense mmWave small cells (every ~60 m) over a sub-6 GHz grid\n"
        "# (ISD 300 m), stochastic LOS and correlated shadow fading (TR 38.901 UMi), M2HO's event\n"
        "# logic, handover timing defaults and imperfections.\n"
        "# Generated by crates/ran/tools/gen_m2ho_scenarios.py; keys in crates/ran/README.md.\n\n"
    )
    ev = EVENTS.format(off=3.0, ttt=160, ttt_up=320, a4=-95.0, a2=-105.0, a1=-100.0, a2s=-95.0)
    with open("scenarios/walking-m2ho.toml", "w") as f:
        sim = SIM.format(
            name="walking-m2ho",
            description="M2HO-style walk: 1.4 m/s around a block with dense mmWave small cells, loaded UDP sender",
            duration="600s",
            rate="100Mbit/s",
        )
        f.write(head + sim + HEAD + IMPERFECTIONS + ev + "\n" + cells_toml(cells + mm, "umi") + ue(route, 1.4))


if __name__ == "__main__":
    main()
