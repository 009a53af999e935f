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
#: M2HO Sec. 3.3's measurements of CUBIC around handovers (findings 1-4) and Sec. 6.3.2:
#: mean RTT (ms); handovers with a target-cell buffer overflow, all and from a mmWave
#: source (%); handovers with duplicate ACKs from the context release (%); CUBIC's share of
#: the mmWave capacity (468.4 of 993.1 Mbit/s, %); predicted handovers without loss under
#: M2HO (%); without a handover, losses a minute and drops of TCP's throughput by more than
#: half a minute (Sec. 3.3).
M2HO_FINDINGS = {"rtt_ms": 69.7, "overflow_pct": 17.7, "overflow_from_mmw_pct": 68.7,
                 "dup_ack_pct": 18.4, "cubic_mmw_utilisation_pct": 47.2,
                 "predicted_loss_free_pct": 97.9, "losses_per_min_without_handover": 1.25,
                 "halvings_per_min_without_handover": 0.73}

# Coexistence study ("Joint Congestion Control Evaluation for MPTCP and MPQUIC over
# Multi-Link Backhauls"). Keys: scenario (symmetric / asymmetric eMBB, Sections 4.1 and 4.3;
# mmtc-symmetric / mmtc-asymmetric, Sections 4.2 and 4.4; mixed, Section 4.5), then the
# pairing "MPTCP-MPQUIC" congestion control in lower case.

#: Tables 2 and 11: Jain's index between MPTCP and MPQUIC (TN1, TN2, total).
COEX_JAIN = {'symmetric': {'bbr-bbr': (0.9728, 0.9574, 0.9655),
               'bbr-cubic': (0.9876, 0.9993, 0.9952),
               'cubic-bbr': (0.9882, 0.9898, 0.989),
               'cubic-cubic': (0.9932, 0.9928, 0.993),
               'reno-bbr': (0.9816, 0.9977, 0.9915),
               'reno-cubic': (0.9992, 0.9705, 0.9898)},
 'asymmetric': {'bbr-bbr': (0.9148, 0.931, 0.922),
                'bbr-cubic': (0.9924, 0.9669, 0.9834),
                'cubic-bbr': (0.8949, 0.897, 0.8959),
                'cubic-cubic': (0.9532, 0.8808, 0.9246),
                'reno-bbr': (0.9159, 0.897, 0.9078),
                'reno-cubic': (0.9889, 0.8488, 0.9436)}}

#: Tables 3, 12, 7, 16, 20: mean jitter, ms (TN1, TN2, TN1 MPTCP, TN1 MPQUIC, TN2 MPTCP,
#: TN2 MPQUIC).
COEX_JITTER = {'symmetric': {'bbr-bbr': (1.445, 1.461, 3.645, 2.037, 3.722, 2.019),
               'bbr-cubic': (3.339, 3.332, 4.341, 14.722, 4.33, 15.303),
               'cubic-bbr': (1.563, 1.572, 4.011, 2.287, 3.772, 2.288),
               'cubic-cubic': (2.662, 2.692, 4.225, 5.179, 4.005, 5.684),
               'reno-bbr': (1.552, 1.569, 3.775, 2.277, 3.726, 2.18),
               'reno-cubic': (2.737, 2.787, 4.268, 5.732, 3.96, 6.787)},
 'asymmetric': {'bbr-bbr': (1.511, 1.614, 3.647, 2.074, 4.999, 2.083),
                'bbr-cubic': (2.717, 3.547, 4.173, 6.91, 5.725, 7.634),
                'cubic-bbr': (1.49, 1.636, 3.773, 2.106, 5.335, 2.114),
                'cubic-cubic': (2.667, 3.5, 3.959, 5.734, 5.058, 8.874),
                'reno-bbr': (1.492, 1.594, 3.678, 2.055, 5.104, 2.056),
                'reno-cubic': (3.023, 3.782, 4.258, 8.224, 5.258, 11.251)},
 'mmtc-symmetric': {'cubic-bbr': (1.919, 1.841, 4.265, 4.414, 4.415, 3.694),
                    'reno-bbr': (1.878, 1.775, 4.246, 3.868, 4.33, 3.632)},
 'mmtc-asymmetric': {'bbr-bbr': (2.246, 2.354, 4.211, 5.364, 5.643, 5.004),
                     'reno-bbr': (1.893, 2.123, 4.026, 3.861, 5.564, 4.14)},
 'mixed': {'bbr-bbr': (1.524, 1.821, 4.211, 2.02, 5.012, 2.493),
           'reno-bbr': (1.682, 1.858, 4.501, 2.258, 5.326, 2.576)}}

#: Tables 4/5, 13/14, 8/9, 17/18, 21/22: throughput per 100 ms, Mbit/s (min, max, mean, std),
#: by protocol and link.
COEX_THROUGHPUT = {'symmetric': {'mptcp': {'tn1': {'bbr-bbr': (242.81, 360.3, 289.89, 28.73),
                                 'bbr-cubic': (5.79, 364.72, 220.69, 63.2),
                                 'cubic-bbr': (149.18, 433.56, 272.29, 53.15),
                                 'cubic-cubic': (178.41, 469.01, 266.0, 58.72),
                                 'reno-bbr': (149.79, 378.45, 277.78, 62.98),
                                 'reno-cubic': (169.01, 406.45, 255.57, 46.63)},
                         'tn2': {'bbr-bbr': (264.21, 351.95, 300.76, 26.66),
                                 'bbr-cubic': (9.16, 360.51, 241.67, 66.26),
                                 'cubic-bbr': (130.37, 357.63, 269.71, 46.7),
                                 'cubic-cubic': (163.89, 447.85, 269.51, 50.12),
                                 'reno-bbr': (150.18, 412.13, 247.92, 50.3),
                                 'reno-cubic': (210.26, 492.55, 291.67, 55.49)}},
               'mpquic': {'tn1': {'bbr-bbr': (39.71, 258.43, 206.83, 28.4),
                                  'bbr-cubic': (44.76, 506.19, 276.36, 68.39),
                                  'cubic-bbr': (44.04, 296.55, 218.55, 47.14),
                                  'cubic-cubic': (31.66, 332.84, 225.27, 56.87),
                                  'reno-bbr': (40.24, 297.65, 210.93, 53.55),
                                  'reno-cubic': (43.47, 338.72, 241.5, 51.21)},
                          'tn2': {'bbr-bbr': (54.37, 239.07, 195.97, 24.32),
                                  'bbr-cubic': (51.61, 499.01, 254.98, 69.68),
                                  'cubic-bbr': (50.38, 287.47, 219.9, 39.09),
                                  'cubic-cubic': (34.15, 337.1, 227.24, 52.62),
                                  'reno-bbr': (58.93, 288.15, 225.43, 39.19),
                                  'reno-cubic': (9.03, 286.92, 205.06, 55.96)}}},
 'asymmetric': {'mptcp': {'tn1': {'bbr-bbr': (252.66, 392.77, 323.98, 23.77),
                                  'bbr-cubic': (23.24, 346.22, 226.9, 58.94),
                                  'cubic-bbr': (278.88, 418.46, 333.25, 35.07),
                                  'cubic-cubic': (188.31, 443.43, 304.04, 44.28),
                                  'reno-bbr': (215.22, 395.99, 323.27, 30.52),
                                  'reno-cubic': (186.57, 414.21, 274.48, 31.4)},
                          'tn2': {'bbr-bbr': (135.94, 297.45, 246.49, 33.41),
                                  'bbr-cubic': (0.0, 311.92, 157.86, 74.43),
                                  'cubic-bbr': (161.91, 297.13, 259.36, 31.53),
                                  'cubic-cubic': (116.31, 390.48, 264.79, 56.26),
                                  'reno-bbr': (210.04, 324.19, 259.4, 20.69),
                                  'reno-cubic': (144.86, 339.59, 275.53, 35.67)}},
                'mpquic': {'tn1': {'bbr-bbr': (43.96, 239.03, 172.48, 25.39),
                                   'bbr-cubic': (41.22, 489.31, 270.33, 63.37),
                                   'cubic-bbr': (52.66, 225.97, 163.17, 36.0),
                                   'cubic-cubic': (48.12, 313.92, 193.73, 46.62),
                                   'reno-bbr': (39.25, 269.48, 172.94, 30.33),
                                   'reno-cubic': (51.08, 311.84, 221.89, 36.28)},
                           'tn2': {'bbr-bbr': (50.84, 255.08, 140.97, 35.08),
                                   'bbr-cubic': (49.26, 432.22, 229.52, 76.46),
                                   'cubic-bbr': (52.71, 227.29, 128.09, 32.16),
                                   'cubic-cubic': (3.16, 276.46, 122.37, 56.51),
                                   'reno-bbr': (53.48, 180.28, 128.09, 21.52),
                                   'reno-cubic': (48.63, 251.73, 111.99, 36.03)}}},
 'mmtc-symmetric': {'mptcp': {'tn1': {'cubic-bbr': (136.11, 481.55, 248.67, 44.76),
                                      'reno-bbr': (159.58, 464.56, 260.89, 46.24)},
                              'tn2': {'cubic-bbr': (103.38, 435.17, 338.55, 46.65),
                                      'reno-bbr': (88.83, 434.01, 321.82, 50.68)}},
                    'mpquic': {'tn1': {'cubic-bbr': (3.16, 291.98, 204.73, 72.58),
                                       'reno-bbr': (2.83, 272.34, 193.13, 64.98)},
                               'tn2': {'cubic-bbr': (12.87, 219.74, 134.44, 41.24),
                                       'reno-bbr': (12.96, 278.95, 147.01, 50.75)}}},
 'mmtc-asymmetric': {'mptcp': {'tn1': {'bbr-bbr': (126.42, 478.35, 257.26, 61.49),
                                       'reno-bbr': (151.54, 500.84, 280.95, 48.44)},
                               'tn2': {'bbr-bbr': (87.28, 355.03, 296.72, 47.99),
                                       'reno-bbr': (100.83, 353.26, 298.89, 41.33)}},
                     'mpquic': {'tn1': {'bbr-bbr': (3.18, 377.68, 215.47, 87.32),
                                        'reno-bbr': (3.18, 326.69, 190.08, 67.03)},
                                'tn2': {'bbr-bbr': (13.7, 217.5, 85.97, 40.47),
                                        'reno-bbr': (13.3, 189.69, 83.24, 31.66)}}},
 'mixed': {'mptcp': {'tn1': {'bbr-bbr': (216.84, 432.57, 318.24, 36.33),
                             'reno-bbr': (223.91, 446.18, 313.81, 40.7)},
                     'tn2': {'bbr-bbr': (134.26, 327.94, 240.08, 49.81),
                             'reno-bbr': (148.73, 334.61, 256.02, 42.23)}},
           'mpquic': {'tn1': {'bbr-bbr': (38.42, 257.63, 176.28, 29.37),
                              'reno-bbr': (41.17, 262.84, 178.62, 33.25)},
                      'tn2': {'bbr-bbr': (11.36, 296.42, 146.81, 49.73),
                              'reno-bbr': (14.28, 271.53, 129.75, 39.51)}}}}

#: Tables 6, 15, 10, 19, 23: packet loss, % (min, max, mean, std), by protocol.
COEX_LOSS = {'symmetric': {'mptcp': {'bbr-bbr': (0.0, 0.203, 0.03, 0.032),
                         'bbr-cubic': (0.0, 4.538, 1.825, 0.879),
                         'cubic-bbr': (0.0, 0.612, 0.162, 0.114),
                         'cubic-cubic': (0.0, 4.838, 3.15, 0.697),
                         'reno-bbr': (0.0, 0.926, 0.26, 0.194),
                         'reno-cubic': (0.0, 5.218, 3.766, 1.036)},
               'mpquic': {'bbr-bbr': (0.0, 0.0, 0.0, 0.0),
                          'bbr-cubic': (0.0, 0.0, 0.0, 0.0),
                          'cubic-bbr': (0.0, 0.0, 0.0, 0.0),
                          'cubic-cubic': (0.0, 0.046, 0.018, 0.012),
                          'reno-bbr': (0.0, 0.579, 0.104, 0.112),
                          'reno-cubic': (0.0, 0.0, 0.0, 0.0)}},
 'asymmetric': {'mptcp': {'bbr-bbr': (0.0, 0.0, 0.0, 0.0),
                          'bbr-cubic': (0.0, 2.008, 1.019, 0.354),
                          'cubic-bbr': (0.0, 0.411, 0.186, 0.091),
                          'cubic-cubic': (0.0, 1.916, 1.282, 0.603),
                          'reno-bbr': (0.0, 0.053, 0.016, 0.011),
                          'reno-cubic': (0.0, 3.033, 1.522, 0.635)},
                'mpquic': {'bbr-bbr': (0.0, 0.0, 0.0, 0.0),
                           'bbr-cubic': (0.0, 0.0, 0.0, 0.0),
                           'cubic-bbr': (0.0, 0.046, 0.01, 0.009),
                           'cubic-cubic': (0.0, 0.027, 0.004, 0.009),
                           'reno-bbr': (0.0, 0.0, 0.0, 0.0),
                           'reno-cubic': (0.0, 0.02, 0.003, 0.003)}},
 'mmtc-symmetric': {'mptcp': {'cubic-bbr': (0.0, 2.617, 0.462, 0.262),
                              'reno-bbr': (0.0, 2.788, 0.436, 0.262)},
                    'mpquic': {'cubic-bbr': (0.0, 2.942, 1.523, 1.245),
                               'reno-bbr': (0.0, 4.349, 2.299, 1.806)}},
 'mmtc-asymmetric': {'mptcp': {'bbr-bbr': (0.0, 1.478, 0.186, 0.151),
                               'reno-bbr': (0.0, 1.676, 0.15, 0.187)},
                     'mpquic': {'bbr-bbr': (0.0, 4.677, 2.482, 2.011),
                                'reno-bbr': (0.0, 3.586, 1.658, 1.537)}},
 'mixed': {'mptcp': {'bbr-bbr': (0.0, 0.072, 0.028, 0.02),
                     'reno-bbr': (0.0, 0.594, 0.214, 0.197)},
           'mpquic': {'bbr-bbr': (0.0, 0.351, 0.188, 0.128),
                      'reno-bbr': (0.0, 0.603, 0.296, 0.225)}}}

# CHYMP / MPF-Gateway ("To Poly or Not to Poly: QoS-Aware Multi-Path Networking").

#: CHYMP, Table I: the PMF's interface measurements (throughput in
#: Mbit/s, average delay in ms, packet loss in percent).
CHYMP_TABLE_I = {
    "eth": {"throughput": 93.61, "delay": 0.15, "loss": 0.25},
    "wifi": {"throughput": 74.45, "delay": 0.19, "loss": 0.00},
}

#: CHYMP, Figs. 6-7: the policy's delay requirement and Wi-Fi's raised delay, ms.
CHYMP_QOS_DELAY_LIMIT_MS = 1.0
CHYMP_QOS_RAISED_DELAY_MS = 1.5

#: CHYMP, Section VI-C and Fig. 10: CHYMP's effective throughput over MPTCP's in
#: stable conditions ("5.5% higher").
CHYMP_STABLE_GAIN = 0.055

#: CHYMP, Section VI-C and Fig. 11: CHYMP completes the transfer under an
#: interface failure "8.2% faster" than MPTCP.
CHYMP_FAILURE_SPEEDUP = 0.082

#: CHYMP, Section VI-B and Fig. 9: MPTCP halts transmission on every link for
#: about 80 ms when the Wi-Fi interface fails.
CHYMP_MPTCP_HALT_MS = 80.0
