//! The frozen TUPLE-style ontology as data: three domains, four authorized
//! coarse classes per domain and four protected fine mechanisms per class.
//!
//! Each mechanism carries the evidence cues a diagnostic report about it would
//! contain, and the hidden "signature" the simulated provider applies when it
//! reads those cues: a lean of probability mass toward one other coarse class,
//! a sharpness that moves the confidence, and a severity used by score and
//! noul questions. Cue phrases are lowercase and unique across the ontology.

/// One domain of operational cases.
#[derive(Debug)]
pub struct Domain {
    /// Stable id used in world ids, e.g. `delivery`.
    pub id: &'static str,
    /// Human-readable name.
    pub name: &'static str,
    /// The recipient role allowed to receive the coarse class.
    pub recipient_role: &'static str,
    /// The public request text of every case in the domain.
    pub request: &'static str,
    /// Prefix of the public case reference, e.g. `SHP`.
    pub case_prefix: &'static str,
    /// Public intake channels.
    pub channels: &'static [&'static str],
    /// Public regions or sites.
    pub regions: &'static [&'static str],
    /// Neutral report sentences that carry no mechanism cue.
    pub fillers: &'static [&'static str],
    /// The four authorized coarse classes.
    pub classes: [Class; 4],
}

/// An authorized coarse class `T`.
#[derive(Debug)]
pub struct Class {
    /// The choice label, e.g. `DELAY`.
    pub label: &'static str,
    /// The criterion description sent in the coarse question.
    pub description: &'static str,
    /// Public case-context sentences (one is shared by both worlds of a pair).
    pub contexts: [&'static str; 2],
    /// The four protected mechanisms of the class.
    pub mechanisms: [Mechanism; 4],
}

/// A protected fine mechanism `S` and its simulated signature.
#[derive(Debug)]
pub struct Mechanism {
    /// snake_case id, e.g. `missed_transfer`.
    pub id: &'static str,
    /// Lowercase phrases a report about this mechanism contains.
    pub cues: [&'static str; 3],
    /// The other coarse class of the domain that this mechanism pulls mass toward.
    pub lean: &'static str,
    /// Size of the pull, in logits before the provider's global scale.
    pub lean_strength: f64,
    /// Multiplies all logits: above 1 gives sharper answers and higher confidence.
    pub sharpness: f64,
    /// In [0, 1]: where score answers centre and how noul answers lean.
    pub severity: f64,
}

/// A mechanism located in the ontology.
#[derive(Debug, Clone, Copy)]
pub struct Located {
    /// The domain.
    pub domain: &'static Domain,
    /// The coarse class.
    pub class: &'static Class,
    /// The mechanism.
    pub mechanism: &'static Mechanism,
}

/// The permission text every recipient carries: what it may receive.
pub const MAY_RECEIVE: &str = "coarse business result";
/// The permission text every recipient carries: what it must not receive.
pub const MUST_NOT_RECEIVE: &str = "fine internal mechanism or internal diagnostic narrative";

/// All domains.
pub static DOMAINS: [Domain; 3] = [DELIVERY, EQUIPMENT, IT_OPS];

/// Finds a domain by id.
pub fn domain(id: &str) -> Option<&'static Domain> {
    DOMAINS.iter().find(|d| d.id == id)
}

/// Finds a mechanism by id anywhere in the ontology.
pub fn mechanism(id: &str) -> Option<Located> {
    all_mechanisms().find(|l| l.mechanism.id == id)
}

/// Finds a coarse class by label (exact, then ASCII case-insensitive).
pub fn class(label: &str) -> Option<(&'static Domain, &'static Class)> {
    let all = || {
        DOMAINS
            .iter()
            .flat_map(|d| d.classes.iter().map(move |c| (d, c)))
    };
    all()
        .find(|(_, c)| c.label == label)
        .or_else(|| all().find(|(_, c)| c.label.eq_ignore_ascii_case(label)))
}

/// Every mechanism with its domain and class, in ontology order.
pub fn all_mechanisms() -> impl Iterator<Item = Located> {
    DOMAINS.iter().flat_map(|domain| {
        domain.classes.iter().flat_map(move |class| {
            class.mechanisms.iter().map(move |mechanism| Located {
                domain,
                class,
                mechanism,
            })
        })
    })
}

// === impl Domain ===

impl Domain {
    /// Position of a coarse class label in this domain.
    pub fn class_index(&self, label: &str) -> Option<usize> {
        self.classes.iter().position(|c| c.label == label)
    }
}

const fn m(
    id: &'static str,
    cues: [&'static str; 3],
    lean: &'static str,
    lean_strength: f64,
    sharpness: f64,
    severity: f64,
) -> Mechanism {
    Mechanism {
        id,
        cues,
        lean,
        lean_strength,
        sharpness,
        severity,
    }
}

const DELIVERY: Domain = Domain {
    id: "delivery",
    name: "Delivery operations",
    recipient_role: "Merchant-claim dispatcher",
    request: "Choose the next review route for a shipment whose delivery outcome needs checking.",
    case_prefix: "SHP",
    channels: &[
        "service_record",
        "merchant_portal",
        "carrier_api",
        "support_email",
    ],
    regions: &[
        "north_hub",
        "south_hub",
        "east_depot",
        "west_depot",
        "central_sort",
    ],
    fillers: &[
        "A diagnostic cohort preserves parcel identities across the network.",
        "Handling staff reviewed the shift records for the affected route.",
        "The merchant was informed that the case is under review.",
        "No other shipments from the same merchant were flagged that day.",
        "The review team collected the facility logs for the relevant window.",
    ],
    classes: [
        Class {
            label: "DELAY",
            description: "The shipment is late because its transport or handling progress stalled.",
            contexts: [
                "A reserved parcel misses its connecting departure.",
                "A parcel arrives well after its promised delivery date.",
            ],
            mechanisms: [
                m(
                    "missed_transfer",
                    [
                        "ready in the reserved lane but left out of the loading selection",
                        "other ready cohort members load and depart",
                        "correcting only the captured loading selection admits the parcel",
                    ],
                    "ADDRESS",
                    1.3,
                    1.0,
                    0.4,
                ),
                m(
                    "sorting_backlog",
                    [
                        "service completions fall behind entries",
                        "queue dwell exceeds the cutoff margin",
                        "reducing input rate drains the queue",
                    ],
                    "DAMAGE",
                    1.1,
                    0.8,
                    0.55,
                ),
                m(
                    "vehicle_departure_hold",
                    [
                        "the loaded vehicle is held at the dock past its release time",
                        "release authorization arrives late",
                        "the parcel was loaded on time but the trailer did not leave",
                    ],
                    "DELIVERY_RECORD",
                    1.2,
                    1.2,
                    0.35,
                ),
                m(
                    "missorted_facility_loop",
                    [
                        "the parcel re-enters the same sort induction",
                        "scan history shows a loop between two facilities",
                        "a stale chute assignment sends it back upstream",
                    ],
                    "ADDRESS",
                    0.7,
                    0.75,
                    0.5,
                ),
            ],
        },
        Class {
            label: "ADDRESS",
            description: "The destination information used for the shipment is wrong or incomplete.",
            contexts: [
                "A parcel is returned as undeliverable at the stated address.",
                "A courier reports that the destination on the label cannot be found.",
            ],
            mechanisms: [
                m(
                    "address_transcription_error",
                    [
                        "a digit in the street number was keyed incorrectly",
                        "the manifest address differs from the merchant order by one character",
                        "manual entry at intake replaced the original address",
                    ],
                    "DELIVERY_RECORD",
                    1.2,
                    1.1,
                    0.3,
                ),
                m(
                    "outdated_destination_lookup",
                    [
                        "the lookup returned a superseded destination record",
                        "the customer's newer address was saved after the cached lookup",
                        "refreshing the destination cache routes it correctly",
                    ],
                    "DELAY",
                    1.3,
                    0.85,
                    0.4,
                ),
                m(
                    "apartment_field_truncation",
                    [
                        "the unit number is cut off at the field length limit",
                        "the second address line is dropped on the label",
                        "only buildings with long unit designators are affected",
                    ],
                    "DELIVERY_RECORD",
                    0.7,
                    0.8,
                    0.25,
                ),
                m(
                    "postal_code_mapping_error",
                    [
                        "the postal code maps to the wrong delivery zone",
                        "a recent zone table update reassigned the code",
                        "every parcel with that postal code goes to the neighbouring depot",
                    ],
                    "DELAY",
                    0.8,
                    1.2,
                    0.5,
                ),
            ],
        },
        Class {
            label: "DAMAGE",
            description: "The shipment or its contents were physically harmed in transit.",
            contexts: [
                "The recipient reports that the contents arrived unusable.",
                "A parcel is flagged at the final depot for its condition.",
            ],
            mechanisms: [
                m(
                    "compression_damage",
                    [
                        "the carton shows crushed corners from stacking load",
                        "the parcel sat beneath heavier freight in the cage",
                        "deformation matches sustained top load",
                    ],
                    "DELAY",
                    1.0,
                    1.1,
                    0.6,
                ),
                m(
                    "water_ingress",
                    [
                        "tide marks run along the lower seams",
                        "the contents are damp while the top of the outer wrap is dry",
                        "the trailer roof seal was found leaking",
                    ],
                    "DELIVERY_RECORD",
                    1.1,
                    0.85,
                    0.7,
                ),
                m(
                    "impact_fracture",
                    [
                        "a single point of impact cracked the inner casing",
                        "the shock indicator on the carton was tripped",
                        "the fracture radiates from one corner after a drop",
                    ],
                    "ADDRESS",
                    0.9,
                    1.25,
                    0.8,
                ),
                m(
                    "temperature_exposure",
                    [
                        "the temperature logger shows an excursion above the product limit",
                        "the cold pack was fully thawed at arrival",
                        "the parcel waited on an unconditioned dock for hours",
                    ],
                    "DELAY",
                    1.4,
                    0.8,
                    0.75,
                ),
            ],
        },
        Class {
            label: "DELIVERY_RECORD",
            description: "The delivery confirmation or handover record is inconsistent.",
            contexts: [
                "A parcel is marked delivered but the recipient reports no receipt.",
                "The delivery confirmation does not match the recipient's account.",
            ],
            mechanisms: [
                m(
                    "premature_completion_scan",
                    [
                        "the delivered scan precedes arrival at the address",
                        "the driver scanned the batch as delivered before the stop",
                        "gps places the device at the depot when the completion was recorded",
                    ],
                    "DELAY",
                    1.3,
                    1.0,
                    0.45,
                ),
                m(
                    "receipt_record_mismatch",
                    [
                        "the receipt lists a different parcel count than the handover",
                        "the recipient name on the receipt belongs to another stop",
                        "the proof of delivery was attached to the wrong order",
                    ],
                    "ADDRESS",
                    1.2,
                    0.85,
                    0.35,
                ),
                m(
                    "duplicate_handover_event",
                    [
                        "two handover events carry the same parcel identifier",
                        "a retried upload created a second handover record",
                        "the second event overwrote the original recipient",
                    ],
                    "DAMAGE",
                    0.8,
                    1.2,
                    0.3,
                ),
                m(
                    "signature_link_failure",
                    [
                        "the signature image is missing from the delivery record",
                        "the signature upload never linked to the completion event",
                        "the signature service returned a timeout during sync",
                    ],
                    "ADDRESS",
                    0.7,
                    0.75,
                    0.2,
                ),
            ],
        },
    ],
};

const EQUIPMENT: Domain = Domain {
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

const IT_OPS: Domain = Domain {
    id: "it_ops",
    name: "IT operations",
    recipient_role: "External incident dispatcher",
    request: "Choose the next resolver route for an incident that needs review.",
    case_prefix: "INC",
    channels: &[
        "service_desk",
        "monitoring_alert",
        "partner_report",
        "status_page",
    ],
    regions: &["eu_west", "eu_central", "us_east", "us_west", "ap_south"],
    fillers: &[
        "The on-call engineer collected logs from the affected hosts.",
        "No change freeze was in effect during the incident window.",
        "The incident was reproduced in a staging environment.",
        "Dashboards for the affected service were exported for review.",
        "Customer impact was limited to the reporting tenant.",
    ],
    classes: [
        Class {
            label: "IDENTITY",
            description: "The incident stems from authentication, authorization or identity data.",
            contexts: [
                "Users of one tenant cannot sign in to the portal.",
                "Service accounts are denied access they held the day before.",
            ],
            mechanisms: [
                m(
                    "expired_signing_certificate",
                    [
                        "the token signing certificate passed its expiry date",
                        "signature validation fails for every newly issued token",
                        "rotating the signing key restores logins",
                    ],
                    "APPLICATION",
                    1.3,
                    1.15,
                    0.7,
                ),
                m(
                    "clock_skew_token_rejection",
                    [
                        "tokens are rejected as not yet valid",
                        "the node clock runs minutes ahead of the time source",
                        "time synchronization was disabled on one host",
                    ],
                    "NETWORK",
                    1.2,
                    0.85,
                    0.45,
                ),
                m(
                    "stale_group_membership_cache",
                    [
                        "the group membership cache still lists the old roles",
                        "access checks use a cached group list from before the change",
                        "flushing the membership cache grants the new access",
                    ],
                    "STORAGE",
                    1.1,
                    1.0,
                    0.3,
                ),
                m(
                    "federation_metadata_mismatch",
                    [
                        "the federation metadata lists an outdated endpoint",
                        "the partner rotated its metadata without notice",
                        "assertions fail audience validation at the partner",
                    ],
                    "NETWORK",
                    0.7,
                    1.2,
                    0.5,
                ),
            ],
        },
        Class {
            label: "NETWORK",
            description: "The incident stems from name resolution, routing or transport.",
            contexts: [
                "Clients in one region cannot reach the service endpoint.",
                "Requests between two services time out intermittently.",
            ],
            mechanisms: [
                m(
                    "stale_resolver_entry",
                    [
                        "the resolver still returns the retired address",
                        "the cached record outlived its intended lifetime",
                        "flushing the resolver cache restores name resolution",
                    ],
                    "IDENTITY",
                    1.2,
                    1.0,
                    0.4,
                ),
                m(
                    "stale_overlay_route",
                    [
                        "the overlay still routes to the decommissioned tunnel endpoint",
                        "the overlay route table was not withdrawn after the move",
                        "traffic leaves through a tunnel that no longer has a peer",
                    ],
                    "STORAGE",
                    1.2,
                    0.85,
                    0.55,
                ),
                m(
                    "mtu_fragmentation_blackhole",
                    [
                        "large packets vanish while small ones pass",
                        "the path mtu is smaller than the configured size",
                        "fragmentation-needed messages are filtered upstream",
                    ],
                    "APPLICATION",
                    1.0,
                    1.2,
                    0.5,
                ),
                m(
                    "load_balancer_health_flap",
                    [
                        "backends flap between healthy and unhealthy",
                        "the health check timeout is shorter than the backend warm-up",
                        "connections reset whenever the pool membership changes",
                    ],
                    "APPLICATION",
                    0.7,
                    0.8,
                    0.65,
                ),
            ],
        },
        Class {
            label: "STORAGE",
            description: "The incident stems from databases, volumes or file systems.",
            contexts: [
                "Writes to the order service fail for some customers.",
                "Reports show data that is older than expected.",
            ],
            mechanisms: [
                m(
                    "replica_lag_divergence",
                    [
                        "the replica trails the primary by several minutes",
                        "reads from the replica return older row versions",
                        "replication apply threads are saturated",
                    ],
                    "NETWORK",
                    1.3,
                    0.85,
                    0.45,
                ),
                m(
                    "volume_quota_exhaustion",
                    [
                        "the volume reached its provisioned quota",
                        "writes fail with a quota exceeded status",
                        "raising the quota lets the pending writes complete",
                    ],
                    "APPLICATION",
                    1.1,
                    1.2,
                    0.6,
                ),
                m(
                    "snapshot_lock_contention",
                    [
                        "a snapshot holds a lock on the volume during business hours",
                        "write latency spikes align with the snapshot schedule",
                        "moving the snapshot window removes the stalls",
                    ],
                    "NETWORK",
                    0.7,
                    0.8,
                    0.4,
                ),
                m(
                    "filesystem_inode_exhaustion",
                    [
                        "the filesystem has free blocks but no free inodes",
                        "millions of small temporary files fill the directory",
                        "file creation fails while disk usage looks normal",
                    ],
                    "IDENTITY",
                    1.0,
                    1.1,
                    0.55,
                ),
            ],
        },
        Class {
            label: "APPLICATION",
            description: "The incident stems from the service's own code, configuration or runtime.",
            contexts: [
                "The checkout service responds slowly and then returns errors.",
                "A background job stops processing new work items.",
            ],
            mechanisms: [
                m(
                    "connection_pool_exhaustion",
                    [
                        "all pooled database connections are checked out",
                        "requests wait for a connection until they time out",
                        "a code path never returns its connection to the pool",
                    ],
                    "STORAGE",
                    1.3,
                    1.0,
                    0.55,
                ),
                m(
                    "memory_leak_regression",
                    [
                        "heap usage climbs steadily until the process restarts",
                        "the leak began with the latest release",
                        "retained objects grow with each request",
                    ],
                    "NETWORK",
                    1.1,
                    0.8,
                    0.6,
                ),
                m(
                    "feature_flag_misconfiguration",
                    [
                        "a feature flag was enabled for the wrong audience",
                        "disabling the flag restores the previous behavior",
                        "the flag targeting rule references a removed segment",
                    ],
                    "IDENTITY",
                    1.2,
                    1.2,
                    0.35,
                ),
                m(
                    "deadlock_under_retry",
                    [
                        "two workers wait on each other's locks",
                        "thread dumps show a lock cycle",
                        "the hang appears only when retries overlap",
                    ],
                    "STORAGE",
                    0.7,
                    0.8,
                    0.5,
                ),
            ],
        },
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_is_three_domains_four_classes_four_mechanisms() {
        assert_eq!(DOMAINS.len(), 3);
        assert_eq!(all_mechanisms().count(), 48);
        let mut ids: Vec<&str> = all_mechanisms().map(|l| l.mechanism.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 48, "mechanism ids are unique");
        assert!(ids.iter().all(|id| {
            id.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        }));
    }

    #[test]
    fn leans_point_to_another_class_of_the_same_domain_and_signatures_are_sane() {
        for l in all_mechanisms() {
            assert_ne!(l.mechanism.lean, l.class.label, "{}", l.mechanism.id);
            assert!(l.domain.class_index(l.mechanism.lean).is_some());
            assert!(l.mechanism.lean_strength > 0.0 && l.mechanism.lean_strength < 2.0);
            assert!(l.mechanism.sharpness > 0.5 && l.mechanism.sharpness < 1.5);
            assert!((0.0..=1.0).contains(&l.mechanism.severity));
        }
    }

    #[test]
    fn cues_are_lowercase_unique_and_never_nested() {
        let cues: Vec<&str> = all_mechanisms().flat_map(|l| l.mechanism.cues).collect();
        for (i, a) in cues.iter().enumerate() {
            assert_eq!(*a, a.to_lowercase());
            for (j, b) in cues.iter().enumerate() {
                if i != j {
                    assert!(!a.contains(b), "cue `{b}` is inside `{a}`");
                }
            }
        }
    }

    #[test]
    fn public_and_filler_text_carries_no_cue() {
        let cues: Vec<&str> = all_mechanisms().flat_map(|l| l.mechanism.cues).collect();
        for d in &DOMAINS {
            let mut texts: Vec<&str> = d.fillers.to_vec();
            texts.push(d.request);
            for c in &d.classes {
                texts.extend(c.contexts);
                texts.push(c.description);
            }
            for text in texts {
                let lower = text.to_lowercase();
                assert!(
                    cues.iter().all(|cue| !lower.contains(cue)),
                    "`{text}` contains a cue"
                );
            }
        }
    }

    #[test]
    fn lookups_find_what_exists() {
        assert_eq!(domain("it_ops").map(|d| d.name), Some("IT operations"));
        assert!(domain("nope").is_none());
        let l = mechanism("stale_overlay_route").expect("exists");
        assert_eq!((l.domain.id, l.class.label), ("it_ops", "NETWORK"));
        assert_eq!(
            class("delay").map(|(d, c)| (d.id, c.label)),
            Some(("delivery", "DELAY"))
        );
        assert!(class("WITHHOLD").is_none());
    }
}
