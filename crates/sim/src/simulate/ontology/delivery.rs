//! The delivery domain: shipments, their coarse results and mechanisms.

use super::{Class, Domain, m};

pub(super) const DELIVERY: Domain = Domain {
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
