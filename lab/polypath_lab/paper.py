"""The papers' published figures the lab compares with (each with where it is printed)."""

#: LAMP5G (the LAMP5G paper), Table I: completion time of a 1 GB file over NR-DC, five runs.
LAMP5G_TABLE_I = {
    "lamp5g": {"mean": 29.932, "std": 1.099, "min": 28.931, "max": 31.756, "n": 5},
    "dual": {"mean": 69.860, "std": 17.267, "min": 50.777, "max": 93.080, "n": 5},
}

#: LAMP5G (the LAMP5G paper), Sections I and VI-B: average throughput of make-before-break over the
#: break-before-make baseline during the handover ("60% higher", "about 1.6x"); the
#: baseline's interruption was ~1 s at zero and ~3 s of recovery.
LAMP5G_HANDOVER_RATIO = 1.6

#: 5G-CLARITY (the 5G-CLARITY paper), Section 6.2: mean downlink throughput, Mbit/s.
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

#: 5G-CLARITY (the 5G-CLARITY paper), Section 6.3: one-way latency (RTT/2 of netperf request/response),
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

#: 5G-CLARITY (the 5G-CLARITY paper), Section 6.4 and Fig. 8 (right): mean time from an interface
#: coming back after a 5 s interruption until MPTCP used it again, ms.
CLARITY_RECOVERY_MS = {"5g": 517.2, "wifi": 393.3, "lifi": 504.8}

#: M2HO (the M2HO paper), Table 4: handover prediction precision and recall (%), by handover type.
M2HO_TABLE_4 = {
    "naive": {"sub6-sub6": (66.3, 37.9), "sub6-mmW": (24.3, 28.8), "mmW-mmW": (34.3, 36.6),
              "mmW-sub6": (20.4, 32.8), "total": (41.0, 39.0)},
    "m2ho": {"sub6-sub6": (98.9, 93.3), "sub6-mmW": (91.9, 93.2), "mmW-mmW": (88.8, 86.1),
             "mmW-sub6": (88.4, 59.3), "total": (94.8, 87.8)},
}

#: M2HO (the M2HO paper), Table 5: earliness (ms) of M2HO's prediction and of the handover
#: command ("No Pred.") before the handover's execution.
M2HO_TABLE_5 = {"sub6-sub6": (128.7, 43.8), "sub6-mmW": (233.7, 144.3),
                "mmW-mmW": (159.7, 80.6), "mmW-sub6": (146.8, 65.8)}

#: M2HO (the M2HO paper), Table 2: mean throughput (Mbit/s) in [-5, 5] s around handovers and
#: convergence time t (s), M2HO (on CUBIC) and CUBIC, by handover type.
M2HO_TABLE_2 = {
    "sub6-sub6": {"m2ho": (175.0, 6.8), "cubic": (83.2, 14.3)},
    "sub6-mmW": {"m2ho": (287.4, 7.7), "cubic": (138.2, 15.9)},
    "mmW-mmW": {"m2ho": (557.8, 4.9), "cubic": (447.4, 21.2)},
    "mmW-sub6": {"m2ho": (348.8, 3.6), "cubic": (297.7, 19.9)},
    "total": {"m2ho": (314.8, 5.9), "cubic": (215.8, 18.7)},
}

#: M2HO (the M2HO paper), Table 3: duplicate-ACK handling precision and recall (%), by type.
M2HO_TABLE_3 = {
    "sub6-sub6": (89.5, 97.5), "sub6-mmW": (95.8, 99.3), "mmW-mmW": (98.0, 100.0),
    "mmW-sub6": (72.5, 98.9), "total": (90.3, 98.6),
}

#: M2HO (the M2HO paper), Fig. 13 and Sec. 6.3.2: share of handovers without loss (%).
M2HO_NO_LOSS = {"m2ho": 85.2, "cubic": 44.2}
