//! The IT operations domain: incidents, their coarse results and mechanisms.

use super::{Class, Domain, m};

pub(super) const IT_OPS: Domain = Domain {
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
