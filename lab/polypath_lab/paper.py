"""The papers' published figures the lab compares with (each with where it is printed)."""

#: LAMP5G (seed 000), Table I: completion time of a 1 GB file over NR-DC, five runs.
LAMP5G_TABLE_I = {
    "lamp5g": {"mean": 29.932, "std": 1.099, "min": 28.931, "max": 31.756, "n": 5},
    "dual": {"mean": 69.860, "std": 17.267, "min": 50.777, "max": 93.080, "n": 5},
}

#: LAMP5G (seed 000), Sections I and VI-B: average throughput of make-before-break over the
#: break-before-make baseline during the handover ("60% higher", "about 1.6x"); the
#: baseline's interruption was ~1 s at zero and ~3 s of recovery.
LAMP5G_HANDOVER_RATIO = 1.6

#: 5G-CLARITY (seed 002), Section 6.2: mean downlink throughput, Mbit/s.
CLARITY_THROUGHPUT = {
    "5g": 342.0,
    "5g_ll": 116.0,
    "wifi": 1190.0,
    "lifi": 12.1,
    "default": 181.0,
    "redundant": 348.0,
    "rr_n": 41.1,
    "rr_y": 690.0,  # read off Fig. 5 ("almost doubling" is said of WRR vs RR)
    "wrr_30_100_1": 1360.0,
    "wrr_10_100_1": 1160.0,  # "around 200 Mbps less"
}

#: 5G-CLARITY (seed 002), Section 6.3: one-way latency (RTT/2 of netperf request/response),
#: mean and 90th percentile, ms.
CLARITY_LATENCY = {
    "lifi": (1.08, None),
    "wifi": (1.28, None),
    "5g": (10.1, None),
    "5g_ll": (5.6, None),
    "default": (1.00, 1.20),
    "redundant": (0.80, 0.92),
    "rr": (3.52, 5.95),
    "rr_ll": (2.25, 3.15),
    "wrr": (4.66, 10.32),
    "wrr_ll": (2.55, 4.38),
}

#: 5G-CLARITY (seed 002), Section 6.4 and Fig. 8 (right): mean time from an interface
#: coming back after a 5 s interruption until MPTCP used it again, ms.
CLARITY_RECOVERY_MS = {"5g": 517.2, "wifi": 393.3, "lifi": 504.8}

#: CHYMP / MPF-Gateway (seed 004), Table I: the PMF's interface measurements (throughput in
#: Mbit/s, average delay in ms, packet loss in percent).
CHYMP_TABLE_I = {
    "eth": {"throughput": 93.61, "delay": 0.15, "loss": 0.25},
    "wifi": {"throughput": 74.45, "delay": 0.19, "loss": 0.00},
}

#: CHYMP (seed 004), Figs. 6-7: the policy's delay requirement and Wi-Fi's raised delay, ms.
CHYMP_QOS_DELAY_LIMIT_MS = 1.0
CHYMP_QOS_RAISED_DELAY_MS = 1.5

#: CHYMP (seed 004), Section VI-C and Fig. 10: CHYMP's effective throughput over MPTCP's in
#: stable conditions ("5.5% higher").
CHYMP_STABLE_GAIN = 0.055

#: CHYMP (seed 004), Section VI-C and Fig. 11: CHYMP completes the transfer under an
#: interface failure "8.2% faster" than MPTCP.
CHYMP_FAILURE_SPEEDUP = 0.082

#: CHYMP (seed 004), Section VI-B and Fig. 9: MPTCP halts transmission on every link for
#: about 80 ms when the Wi-Fi interface fails.
CHYMP_MPTCP_HALT_MS = 80.0
