//! The equipment domain: field equipment faults, their coarse results and mechanisms.

use super::{Class, Domain, m};

pub(super) const EQUIPMENT: Domain = Domain {
    id: "equipment",
    name: "Equipment service",
    recipient_role: "External service dispatcher",
    request: "Choose the next service route for an equipment fault that needs review.",
    case_prefix: "ASSET",
    channels: &[
        "field_ticket",
        "remote_telemetry",
        "customer_call",
        "maintenance_log",
    ],
    regions: &[
        "plant_a",
        "plant_b",
        "north_site",
        "harbour_site",
        "test_lab",
    ],
    fillers: &[
        "The technician recorded the unit's operating history before testing.",
        "Service staff compared the unit against a known-good reference unit.",
        "The customer reported no recent changes to the installation.",
        "Measurements were repeated on two separate visits.",
        "The unit's maintenance schedule was up to date.",
    ],
    classes: [
        Class {
            label: "POWER",
            description: "The fault lies in the supply path that powers the unit.",
            contexts: [
                "The unit resets intermittently during normal operation.",
                "The unit fails to start on the first attempt each morning.",
            ],
            mechanisms: [
                m(
                    "contact_oxidation",
                    [
                        "green oxide film on the supply contacts",
                        "contact resistance rises after idle periods",
                        "cleaning the terminals restores full voltage",
                    ],
                    "LINK",
                    1.2,
                    1.0,
                    0.35,
                ),
                m(
                    "regulator_drift",
                    [
                        "the regulated output creeps upward as the unit warms",
                        "the regulator setpoint no longer matches its trim value",
                        "output voltage drifts over hours without load change",
                    ],
                    "SENSOR",
                    1.3,
                    0.85,
                    0.5,
                ),
                m(
                    "harness_conductor_fracture",
                    [
                        "voltage drops out when the harness is flexed",
                        "a broken strand was found inside the insulation",
                        "continuity fails only at one bend radius",
                    ],
                    "MOTION",
                    1.1,
                    1.2,
                    0.65,
                ),
                m(
                    "supply_capacitor_degradation",
                    [
                        "ripple on the supply rail grows under load",
                        "the bulk capacitor shows raised equivalent series resistance",
                        "a bulging capacitor can sits near the input stage",
                    ],
                    "SENSOR",
                    0.7,
                    0.8,
                    0.55,
                ),
            ],
        },
        Class {
            label: "LINK",
            description: "The fault lies in the communication path between the unit and its peers.",
            contexts: [
                "The unit drops off the controller network several times a day.",
                "Commands to the unit are acknowledged late or not at all.",
            ],
            mechanisms: [
                m(
                    "connector_fatigue",
                    [
                        "the link drops when the connector is touched",
                        "worn latch retention on the data connector",
                        "fretting marks on the connector pins",
                    ],
                    "POWER",
                    1.2,
                    1.1,
                    0.45,
                ),
                m(
                    "interface_buffer_fault",
                    [
                        "frames are lost when the interface buffer fills",
                        "overrun counters increment during bursts",
                        "the buffer pointer wraps incorrectly after reset",
                    ],
                    "SENSOR",
                    1.2,
                    0.85,
                    0.4,
                ),
                m(
                    "termination_impedance_error",
                    [
                        "reflections appear on the bus at the far end",
                        "the terminating resistor value does not match the cable",
                        "signal edges ring after every transition",
                    ],
                    "POWER",
                    0.7,
                    0.8,
                    0.3,
                ),
                m(
                    "clock_recovery_instability",
                    [
                        "the receiver loses lock on the recovered clock",
                        "jitter tolerance is exceeded at higher line rates",
                        "resynchronization events cluster after temperature changes",
                    ],
                    "MOTION",
                    1.0,
                    1.2,
                    0.5,
                ),
            ],
        },
        Class {
            label: "SENSOR",
            description: "The fault lies in how the unit measures its process or environment.",
            contexts: [
                "The unit reports process values that operators consider implausible.",
                "The unit raises measurement alarms without a visible process upset.",
            ],
            mechanisms: [
                m(
                    "calibration_offset_drift",
                    [
                        "readings carry a constant offset against the reference",
                        "the offset grew steadily since the last calibration",
                        "recalibration removes the bias without hardware changes",
                    ],
                    "POWER",
                    1.3,
                    1.0,
                    0.3,
                ),
                m(
                    "probe_surface_fouling",
                    [
                        "deposits coat the probe face",
                        "response time slows until the probe is cleaned",
                        "residue from the process line covers the sensing window",
                    ],
                    "MOTION",
                    1.1,
                    0.8,
                    0.45,
                ),
                m(
                    "reference_element_aging",
                    [
                        "the internal reference element has aged beyond tolerance",
                        "gain error increases with operating hours",
                        "swapping the reference module restores linearity",
                    ],
                    "LINK",
                    1.2,
                    1.2,
                    0.55,
                ),
                m(
                    "signal_conditioning_saturation",
                    [
                        "the conditioning amplifier clips at the upper rail",
                        "readings flatten at the same ceiling value",
                        "reducing the front-end gain recovers the full range",
                    ],
                    "POWER",
                    0.7,
                    0.75,
                    0.6,
                ),
            ],
        },
        Class {
            label: "MOTION",
            description: "The fault lies in the mechanical drive or positioning of the unit.",
            contexts: [
                "The unit misses its target positions during production runs.",
                "The unit becomes noisy and slows down under load.",
            ],
            mechanisms: [
                m(
                    "bearing_wear",
                    [
                        "vibration spectra show bearing defect frequencies",
                        "radial play in the spindle bearing",
                        "noise rises with shaft speed",
                    ],
                    "POWER",
                    1.1,
                    0.85,
                    0.7,
                ),
                m(
                    "encoder_count_slip",
                    [
                        "the encoder loses counts during rapid reversals",
                        "position error accumulates over repeated cycles",
                        "the index pulse arrives at a shifted count",
                    ],
                    "SENSOR",
                    1.3,
                    1.1,
                    0.5,
                ),
                m(
                    "belt_tension_loss",
                    [
                        "the drive belt has stretched below its tension spec",
                        "the belt skips a tooth under acceleration",
                        "retensioning the belt restores positioning",
                    ],
                    "POWER",
                    0.7,
                    1.2,
                    0.6,
                ),
                m(
                    "servo_loop_oscillation",
                    [
                        "the axis oscillates around its target after each move",
                        "the servo gains were raised in the last update",
                        "lowering the loop gain damps the hunting",
                    ],
                    "LINK",
                    1.2,
                    0.8,
                    0.4,
                ),
            ],
        },
    ],
};
