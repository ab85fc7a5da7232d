//! The metadata store's conformance suite: every scenario runs against SQLite, and against
//! PostgreSQL when `FLOE_TEST_POSTGRES_URL` is set (each test in a fresh database).

mod common;

use floe_controlplane::store::{
    BrokerRegistration, ElectionResult, ElectionStart, GroupOffsetStore, MetadataStore,
    PrincipalStore, ReadReplicaRegistration, ReadReplicaStore, Reassignment, SqlStore, StoreError,
};
use floe_wire::admin::{
    BrokerState, Build, OffsetCommit, OffsetRange, PartitionReport, ReadReplicaHeartbeat,
    ReadReplicaInfo, ReadReplicaState, ReplicaLag, RetentionSettings, ScalingPolicy,
    SegmentSettings, StreamConfig, StreamInfo,
};
use floe_wire::auth::{Principal, PrincipalKind, mint_token};
use floe_wire::{AckMode, BrokerId, Endpoint, LeaderEpoch, PartitionId, StreamName};

/// Runs `scenario` on a fresh SQLite store, then on a fresh PostgreSQL database if one is
/// configured.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                let dir = tempfile::tempdir().expect("temp dir");
                let store = floe_controlplane::store::SqlStore::open_sqlite(
                    &dir.path().join("meta.db"),
                )
                .await
                .expect("SQLite store opens");
                super::$name(&store).await;
            }

            #[tokio::test]
            async fn postgres() {
                let Some(url) = super::common::fresh_postgres_database(stringify!($name)).await
                else {
                    eprintln!("FLOE_TEST_POSTGRES_URL is not set; PostgreSQL skipped");
                    return;
                };
                let store = floe_controlplane::store::SqlStore::connect(&url)
                    .await
                    .expect("PostgreSQL store opens");
                super::$name(&store).await;
            }
        }
    )*};
}

conformance!(
    streams_are_created_listed_described_altered_and_deleted,
    partitions_without_brokers_start_unplaced,
    brokers_register_renew_expire_and_come_back,
    assigned_broker_ids_skip_past_the_largest_to_a_free_one,
    a_stale_reassignment_changes_nothing,
    misplaced_partitions_are_those_on_brokers_that_are_not_live,
    assignments_list_a_brokers_partitions_with_their_stream,
    only_the_current_leader_reports_a_partition,
    group_offsets_commit_all_or_nothing,
    group_offsets_commit_in_batches_and_groups_are_deleted,
    read_replicas_and_the_scaling_policy_are_kept,
    read_replicas_register_heartbeat_drain_expire_and_leave,
    a_replicated_partition_elects_its_leader_once_per_epoch,
    a_leader_that_is_not_live_leaves_its_partition_leaderless,
    the_next_lease_expiry_is_the_earliest_of_brokers_not_dead,
    a_controlplane_taking_over_extends_the_leases_of_brokers_not_dead,
    a_replica_set_changes_in_two_steps,
    principals_are_created_rotated_listed_and_revoked,
);

fn name(text: &str) -> StreamName {
    StreamName::new(text).expect("valid stream name")
}

fn ids(values: &[u32]) -> Vec<BrokerId> {
    values.iter().copied().map(BrokerId::new).collect()
}

fn stream(text: &str, partitions: u32, replication_factor: u32) -> StreamInfo {
    StreamInfo {
        name: name(text),
        config: StreamConfig {
            partitions,
            replication_factor,
            ack_mode: AckMode::Quorum,
            segment: SegmentSettings {
                bytes: Some(64 << 20),
                age_ms: None,
            },
            retention: RetentionSettings {
                local_bytes: Some(1 << 30),
                local_ms: None,
                tier_bytes: None,
                tier_ms: Some(86_400_000),
            },
        },
        created_at_ms: 1_700_000_000_000,
    }
}

fn registration(id: Option<u32>, port: u16, expires: u64) -> BrokerRegistration {
    BrokerRegistration {
        id: id.map(BrokerId::new),
        client_endpoint: Endpoint::new(format!("127.0.0.1:{port}")).expect("endpoint"),
        peer_endpoint: Endpoint::new(format!("127.0.0.1:{}", port + 1)).expect("endpoint"),
        zone: Some("zone-a".to_owned()),
        build: Some(build(port)),
        now_ms: 1_000,
        lease_expires_at_ms: expires,
    }
}

/// A build that tells registrations apart.
fn build(port: u16) -> Build {
    Build {
        version: "1.2.3".to_owned(),
        commit: format!("c{port}"),
    }
}

async fn three_brokers(store: &SqlStore) {
    for port in [7100, 7200, 7300] {
        store
            .register_broker(&registration(None, port, 10_000))
            .await
            .expect("register");
    }
}

/// Ends the epoch-1 election of every partition of `stream` with its first replica.
async fn elect_first_replicas(store: &SqlStore, stream: &str, sets: &[Vec<BrokerId>]) {
    for (partition, set) in (0u32..).zip(sets) {
        store
            .elect_leader(&ElectionResult {
                stream: name(stream),
                partition: PartitionId::new(partition),
                epoch: LeaderEpoch::new(1),
                leader: set[0],
            })
            .await
            .expect("elect");
    }
}

async fn streams_are_created_listed_described_altered_and_deleted(store: &SqlStore) {
    let before = store.assignment_version().await.expect("version");
    let orders = stream("orders", 3, 2);
    let version = store
        .create_stream(&orders, &[ids(&[1, 2]), ids(&[2, 3]), ids(&[3, 1])])
        .await
        .expect("create");
    assert_eq!(version, before + 1);
    store
        .create_stream(&stream("audit", 1, 1), &[ids(&[2])])
        .await
        .expect("create");
    let duplicate = store.create_stream(&orders, &vec![vec![]; 3]).await;
    assert!(
        matches!(duplicate, Err(StoreError::StreamExists { ref name }) if name.as_str() == "orders"),
        "{duplicate:?}"
    );

    let listed = store.streams().await.expect("list");
    assert_eq!(
        listed.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["audit", "orders"]
    );
    assert_eq!(listed[1], orders);

    let described = store
        .describe_stream(&name("orders"))
        .await
        .expect("describe")
        .expect("exists");
    assert_eq!(described.config, orders.config);
    let sets: Vec<_> = described
        .partitions
        .iter()
        .map(|p| p.replicas.clone())
        .collect();
    assert_eq!(sets, [ids(&[1, 2]), ids(&[2, 3]), ids(&[3, 1])]);
    assert!(
        described
            .partitions
            .iter()
            .all(|p| p.epoch == LeaderEpoch::new(1))
    );
    assert!(
        described
            .partitions
            .iter()
            .all(|p| p.electing && p.leader.is_none()),
        "a replicated partition's first leader is elected"
    );
    let audit = store
        .describe_stream(&name("audit"))
        .await
        .expect("describe")
        .expect("exists");
    assert_eq!(audit.partitions[0].leader, Some(BrokerId::new(2)));
    assert!(!audit.partitions[0].electing, "unreplicated: led at once");
    assert_eq!(described.partitions[2].partition, PartitionId::new(2));

    let retention = RetentionSettings {
        local_bytes: None,
        local_ms: Some(60_000),
        tier_bytes: Some(1 << 40),
        tier_ms: None,
    };
    let mut settings = orders.config;
    settings.retention = retention;
    settings.segment.bytes = Some(1 << 20);
    settings.ack_mode = AckMode::Quorum;
    // Only what can change on a live stream is written.
    settings.partitions = 99;
    let (altered, altered_version) = store
        .set_stream_settings(&name("orders"), &settings)
        .await
        .expect("alter");
    assert_eq!(
        altered_version,
        before + 3,
        "brokers learn the new settings"
    );
    assert_eq!(altered.config.retention, retention);
    assert_eq!(altered.config.segment.bytes, Some(1 << 20));
    assert_eq!(altered.config.segment.age_ms, orders.config.segment.age_ms);
    assert_eq!(altered.config.ack_mode, AckMode::Quorum);
    assert_eq!(altered.config.partitions, orders.config.partitions);

    let version = store.delete_stream(&name("orders")).await.expect("delete");
    assert_eq!(version, before + 4);
    assert!(
        store
            .describe_stream(&name("orders"))
            .await
            .expect("describe")
            .is_none()
    );
    assert!(matches!(
        store.delete_stream(&name("orders")).await,
        Err(StoreError::StreamNotFound { .. })
    ));
    assert!(matches!(
        store.set_stream_settings(&name("orders"), &settings).await,
        Err(StoreError::StreamNotFound { .. })
    ));
    // The name is free again, with no leftover partitions.
    store
        .create_stream(&stream("orders", 1, 1), &[ids(&[1])])
        .await
        .expect("create again");
    let again = store
        .describe_stream(&name("orders"))
        .await
        .expect("ok")
        .expect("exists");
    assert_eq!(again.partitions.len(), 1);
    assert_eq!(again.partitions[0].replicas, ids(&[1]));
}

async fn partitions_without_brokers_start_unplaced(store: &SqlStore) {
    store
        .create_stream(&stream("lonely", 2, 3), &[vec![], vec![]])
        .await
        .expect("create");
    let described = store
        .describe_stream(&name("lonely"))
        .await
        .expect("ok")
        .expect("exists");
    for partition in &described.partitions {
        assert_eq!(partition.leader, None);
        assert_eq!(partition.epoch, LeaderEpoch::new(0));
        assert!(partition.replicas.is_empty());
    }
    let misplaced = store.misplaced_partitions().await.expect("misplaced");
    assert_eq!(
        misplaced.len(),
        2,
        "under-replicated partitions need placing"
    );
}

async fn assigned_broker_ids_skip_past_the_largest_to_a_free_one(store: &SqlStore) {
    // A broker that names the largest id must not make the next assigned one overflow.
    let largest = store
        .register_broker(&registration(Some(u32::MAX), 7100, 5_000))
        .await
        .expect("register the largest id");
    assert_eq!(largest.broker_id.get(), u32::MAX);
    let mut assigned = Vec::new();
    for port in [7200, 7300] {
        let broker = store
            .register_broker(&registration(None, port, 5_000))
            .await
            .expect("register");
        assigned.push(broker.broker_id.get());
    }
    assert_eq!(assigned, [1, 2]);
    assert_eq!(store.brokers().await.expect("list").len(), 3);
}

async fn brokers_register_renew_expire_and_come_back(store: &SqlStore) {
    let first = store
        .register_broker(&registration(None, 7100, 5_000))
        .await
        .expect("register");
    let second = store
        .register_broker(&registration(None, 7200, 9_000))
        .await
        .expect("register");
    assert_eq!((first.broker_id.get(), second.broker_id.get()), (1, 2));
    assert_eq!(first.state, BrokerState::Live);
    assert_eq!(first.zone.as_deref(), Some("zone-a"));
    assert_eq!(first.build, Some(build(7100)));

    let renewed = store
        .renew_lease(first.broker_id, 8_000)
        .await
        .expect("renew");
    assert_eq!(renewed.lease_expires_at_ms, 8_000);
    assert!(store.expire_leases(7_999).await.expect("expire").is_empty());
    assert_eq!(store.expire_leases(8_000).await.expect("expire"), ids(&[1]));
    assert!(
        store.expire_leases(8_500).await.expect("expire").is_empty(),
        "dead only once"
    );
    let undrained = store
        .set_broker_state(first.broker_id, BrokerState::Live)
        .await
        .expect("set state");
    assert_eq!(
        undrained.state,
        BrokerState::Dead,
        "only a heartbeat makes a dead broker live"
    );
    assert!(matches!(
        store.renew_lease(first.broker_id, 20_000).await,
        Err(StoreError::LeaseExpired { id }) if id == first.broker_id
    ));
    assert!(matches!(
        store.renew_lease(BrokerId::new(99), 20_000).await,
        Err(StoreError::BrokerNotFound { .. })
    ));

    // Registering again under its id brings it back, with new endpoints.
    let back = store
        .register_broker(&registration(Some(1), 7500, 30_000))
        .await
        .expect("again");
    assert_eq!(back.broker_id, first.broker_id);
    assert_eq!(back.state, BrokerState::Live);
    assert_eq!(back.client_endpoint.as_str(), "127.0.0.1:7500");

    // A draining broker stays draining when it re-registers.
    store
        .set_broker_state(second.broker_id, BrokerState::Draining)
        .await
        .expect("drain");
    let again = store
        .register_broker(&registration(Some(2), 7200, 30_000))
        .await
        .expect("again");
    assert_eq!(again.state, BrokerState::Draining);
    assert!(matches!(
        store
            .set_broker_state(BrokerId::new(42), BrokerState::Draining)
            .await,
        Err(StoreError::BrokerNotFound { .. })
    ));
    let listed = store.brokers().await.expect("list");
    assert_eq!(
        listed.iter().map(|b| b.broker_id.get()).collect::<Vec<_>>(),
        [1, 2]
    );
}

async fn a_stale_reassignment_changes_nothing(store: &SqlStore) {
    three_brokers(store).await;
    store
        .create_stream(&stream("orders", 2, 2), &[ids(&[1, 2]), ids(&[2, 3])])
        .await
        .expect("create");
    let version = store.assignment_version().await.expect("version");
    let change = |partition: u32, expected_epoch: u32, replicas: &[u32]| Reassignment {
        stream: name("orders"),
        partition: PartitionId::new(partition),
        expected_epoch: LeaderEpoch::new(expected_epoch),
        replicas: ids(replicas),
        leader: replicas.first().copied().map(BrokerId::new),
        previous: Vec::new(),
    };
    let stale = store
        .reassign(&[change(0, 1, &[3, 1]), change(1, 0, &[3, 1])])
        .await;
    assert!(
        matches!(
            stale,
            Err(StoreError::EpochConflict {
                expected: LeaderEpoch::ZERO,
                ..
            })
        ),
        "{stale:?}"
    );
    let untouched = store
        .describe_stream(&name("orders"))
        .await
        .expect("ok")
        .expect("exists");
    assert_eq!(
        untouched.partitions[0].replicas,
        ids(&[1, 2]),
        "all or nothing"
    );
    assert_eq!(untouched.partitions[0].epoch, LeaderEpoch::new(1));
    assert_eq!(store.assignment_version().await.expect("version"), version);

    let applied = store
        .reassign(&[change(0, 1, &[3, 1])])
        .await
        .expect("reassign");
    assert_eq!(applied, version + 1);
    let moved = store
        .describe_stream(&name("orders"))
        .await
        .expect("ok")
        .expect("exists");
    assert_eq!(moved.partitions[0].replicas, ids(&[3, 1]));
    assert_eq!(moved.partitions[0].leader, Some(BrokerId::new(3)));
    assert_eq!(moved.partitions[0].epoch, LeaderEpoch::new(2));
}

async fn misplaced_partitions_are_those_on_brokers_that_are_not_live(store: &SqlStore) {
    three_brokers(store).await;
    let sets = [ids(&[1, 2]), ids(&[2, 3]), ids(&[3, 1])];
    store
        .create_stream(&stream("orders", 3, 2), &sets)
        .await
        .expect("create");
    elect_first_replicas(store, "orders", &sets).await;
    assert!(store.misplaced_partitions().await.expect("ok").is_empty());
    store
        .renew_lease(BrokerId::new(1), 1)
        .await
        .expect("shorten the lease");
    assert_eq!(store.expire_leases(2).await.expect("expire"), ids(&[1]));
    let misplaced = store.misplaced_partitions().await.expect("misplaced");
    let partitions: Vec<u32> = misplaced.iter().map(|p| p.partition.get()).collect();
    assert_eq!(partitions, [0, 2]);
    assert_eq!(
        misplaced[0].replicas,
        [
            (BrokerId::new(1), BrokerState::Dead),
            (BrokerId::new(2), BrokerState::Live)
        ]
    );
    assert_eq!(misplaced[0].leader, Some(BrokerId::new(1)));
    assert_eq!(misplaced[0].replication_factor, 2);
    assert_eq!(misplaced[0].epoch, LeaderEpoch::new(1));

    let brokers = store.brokers().await.expect("brokers");
    let counts: Vec<(u32, u32)> = brokers.iter().map(|b| (b.replicas, b.leaders)).collect();
    assert_eq!(counts, [(2, 1), (2, 1), (2, 1)]);
}

async fn assignments_list_a_brokers_partitions_with_their_stream(store: &SqlStore) {
    three_brokers(store).await;
    store
        .create_stream(
            &stream("orders", 3, 2),
            &[ids(&[1, 2]), ids(&[2, 3]), ids(&[3, 1])],
        )
        .await
        .expect("create");
    store
        .create_stream(&stream("audit", 1, 1), &[ids(&[3])])
        .await
        .expect("create");
    let assignments = store
        .assignments(BrokerId::new(3))
        .await
        .expect("assignments");
    assert_eq!(
        assignments.version,
        store.assignment_version().await.expect("version")
    );
    let names: Vec<&str> = assignments
        .streams
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["audit", "orders"]);
    let orders = &assignments.streams[1];
    assert_eq!(orders.config, stream("orders", 3, 2).config);
    let partitions: Vec<(u32, Vec<BrokerId>)> = orders
        .partitions
        .iter()
        .map(|p| (p.partition.get(), p.replicas.clone()))
        .collect();
    assert_eq!(partitions, [(1, ids(&[2, 3])), (2, ids(&[3, 1]))]);
    assert!(matches!(
        store.assignments(BrokerId::new(9)).await,
        Err(StoreError::BrokerNotFound { .. })
    ));
}

async fn only_the_current_leader_reports_a_partition(store: &SqlStore) {
    three_brokers(store).await;
    store
        .create_stream(&stream("orders", 1, 2), &[ids(&[1, 2])])
        .await
        .expect("create");
    elect_first_replicas(store, "orders", &[ids(&[1, 2])]).await;
    let report = |epoch: u32, end: u64| PartitionReport {
        stream: name("orders"),
        partition: PartitionId::new(0),
        epoch: LeaderEpoch::new(epoch),
        hot: Some(OffsetRange { start: 10, end }),
        tier: Some(OffsetRange { start: 0, end: 10 }),
        bytes: 4096,
        upload_backlog_bytes: 512,
        high_watermark: Some(end - 1),
        replica_lag: vec![ReplicaLag {
            broker_id: BrokerId::new(2),
            records: 3,
        }],
        new_set_caught_up: Vec::new(),
        quorum_lost: false,
    };
    store
        .report_partitions(BrokerId::new(2), &[report(1, 99)])
        .await
        .expect("follower");
    store
        .report_partitions(BrokerId::new(1), &[report(0, 98)])
        .await
        .expect("old epoch");
    let untouched = store
        .describe_stream(&name("orders"))
        .await
        .expect("ok")
        .expect("exists");
    assert_eq!(untouched.partitions[0].hot, None);
    assert_eq!(untouched.partitions[0].high_watermark, None);
    assert!(untouched.partitions[0].replica_lag.is_empty());
    store
        .report_partitions(BrokerId::new(1), &[report(1, 50)])
        .await
        .expect("leader");
    let reported = store
        .describe_stream(&name("orders"))
        .await
        .expect("ok")
        .expect("exists");
    let partition = &reported.partitions[0];
    assert_eq!(partition.hot, Some(OffsetRange { start: 10, end: 50 }));
    assert_eq!(partition.tier, Some(OffsetRange { start: 0, end: 10 }));
    assert_eq!(
        (partition.bytes, partition.upload_backlog_bytes),
        (Some(4096), Some(512))
    );
    assert_eq!(partition.high_watermark, Some(49));
    assert_eq!(
        partition.replica_lag,
        vec![ReplicaLag {
            broker_id: BrokerId::new(2),
            records: 3
        }]
    );
}

async fn a_replica_set_changes_in_two_steps(store: &SqlStore) {
    three_brokers(store).await;
    store
        .register_broker(&registration(None, 7400, 10_000))
        .await
        .expect("a fourth broker");
    store
        .create_stream(&stream("orders", 1, 3), &[ids(&[1, 2, 3])])
        .await
        .expect("create");
    elect_first_replicas(store, "orders", &[ids(&[1, 2, 3])]).await;
    // Broker 3 is replaced by 4: the set changes and an election over both starts.
    let version = store
        .reassign(&[Reassignment {
            stream: name("orders"),
            partition: PartitionId::new(0),
            expected_epoch: LeaderEpoch::new(1),
            replicas: ids(&[1, 2, 4]),
            leader: Some(BrokerId::new(1)),
            previous: ids(&[1, 2, 3]),
        }])
        .await
        .expect("change");
    let leadership = store
        .partition_leadership(&name("orders"), PartitionId::new(0))
        .await
        .expect("leadership");
    assert_eq!(
        (leadership.epoch, leadership.leader, leadership.electing),
        (LeaderEpoch::new(2), None, true),
        "a change elects over both sets"
    );
    assert_eq!(leadership.previous, ids(&[1, 2, 3]));
    let newcomer = store
        .assignments(BrokerId::new(4))
        .await
        .expect("assignments");
    assert_eq!(newcomer.version, version);
    let assigned = &newcomer.streams[0].partitions[0];
    assert_eq!(assigned.replicas, ids(&[1, 2, 4]));
    assert_eq!(assigned.previous_replicas, ids(&[1, 2, 3]));
    assert!(
        store
            .assignments(BrokerId::new(3))
            .await
            .expect("assignments")
            .streams
            .is_empty(),
        "the replaced broker holds nothing"
    );
    store
        .elect_leader(&ElectionResult {
            stream: name("orders"),
            partition: PartitionId::new(0),
            epoch: LeaderEpoch::new(2),
            leader: BrokerId::new(1),
        })
        .await
        .expect("elect");
    let caught_up = |epoch: u32, set: &[u32]| PartitionReport {
        stream: name("orders"),
        partition: PartitionId::new(0),
        epoch: LeaderEpoch::new(epoch),
        hot: None,
        tier: None,
        bytes: 0,
        upload_backlog_bytes: 0,
        high_watermark: None,
        replica_lag: Vec::new(),
        new_set_caught_up: ids(set),
        quorum_lost: false,
    };
    // Not the leader, an old epoch, another set: nothing completes.
    for (from, report) in [
        (2, caught_up(2, &[1, 2, 4])),
        (1, caught_up(1, &[1, 2, 4])),
        (1, caught_up(2, &[1, 2, 3])),
    ] {
        let completed = store
            .report_partitions(BrokerId::new(from), &[report])
            .await
            .expect("report");
        assert_eq!(completed, None);
    }
    let completed = store
        .report_partitions(BrokerId::new(1), &[caught_up(2, &[4, 2, 1])])
        .await
        .expect("report");
    assert!(completed.is_some_and(|v| v > version), "{completed:?}");
    let done = store
        .partition_leadership(&name("orders"), PartitionId::new(0))
        .await
        .expect("leadership");
    assert!(done.previous.is_empty());
    assert_eq!(
        (done.epoch, done.leader),
        (LeaderEpoch::new(2), Some(BrokerId::new(1))),
        "completing needs no election"
    );
    let member = store
        .assignments(BrokerId::new(4))
        .await
        .expect("assignments");
    assert!(member.streams[0].partitions[0].previous_replicas.is_empty());
}

fn commit(stream: &str, partition: u32, offset: u64) -> OffsetCommit {
    OffsetCommit {
        stream: name(stream),
        partition: PartitionId::new(partition),
        offset,
    }
}

async fn group_offsets_commit_all_or_nothing(store: &SqlStore) {
    store
        .create_stream(&stream("orders", 2, 1), &[vec![], vec![]])
        .await
        .expect("create");
    store
        .commit_offsets(
            "billing",
            &[commit("orders", 0, 5), commit("orders", 1, 7)],
            100,
        )
        .await
        .expect("commit");
    let bad = store
        .commit_offsets(
            "billing",
            &[commit("orders", 0, 6), commit("orders", 2, 1)],
            200,
        )
        .await;
    assert!(
        matches!(bad, Err(StoreError::PartitionNotFound { .. })),
        "{bad:?}"
    );
    let unknown = store
        .commit_offsets("billing", &[commit("nope", 0, 1)], 200)
        .await;
    assert!(
        matches!(unknown, Err(StoreError::StreamNotFound { .. })),
        "{unknown:?}"
    );
    let offsets = store.group_offsets("billing").await.expect("offsets");
    let values: Vec<(u32, u64, u64)> = offsets
        .iter()
        .map(|o| (o.partition.get(), o.offset, o.updated_at_ms))
        .collect();
    assert_eq!(
        values,
        [(0, 5, 100), (1, 7, 100)],
        "the failed commit wrote nothing"
    );

    store
        .commit_offsets("billing", &[commit("orders", 1, 9)], 300)
        .await
        .expect("commit");
    store
        .commit_offsets("audit", &[commit("orders", 0, 1)], 300)
        .await
        .expect("commit");
    let groups = store.groups().await.expect("groups");
    let summary: Vec<(&str, u32, u32)> = groups
        .iter()
        .map(|g| (g.group.as_str(), g.streams, g.partitions))
        .collect();
    assert_eq!(summary, [("audit", 1, 1), ("billing", 1, 2)]);
    assert_eq!(
        store.group_offsets("billing").await.expect("ok")[1].offset,
        9
    );
    assert!(store.group_offsets("nobody").await.expect("ok").is_empty());

    store.delete_stream(&name("orders")).await.expect("delete");
    assert!(
        store.groups().await.expect("groups").is_empty(),
        "offsets go with the stream"
    );
}

async fn group_offsets_commit_in_batches_and_groups_are_deleted(store: &SqlStore) {
    store
        .create_stream(&stream("orders", 2, 1), &[vec![], vec![]])
        .await
        .expect("create");
    // Two groups in one batch; the later of two entries for one partition wins.
    let (a, b, c) = (
        commit("orders", 0, 5),
        commit("orders", 0, 8),
        commit("orders", 1, 3),
    );
    store
        .commit_offsets_batch(&[("billing", &a), ("audit", &c), ("billing", &b)], 100)
        .await
        .expect("a batch");
    let offsets = |group: &'static str| async move {
        store
            .group_offsets(group)
            .await
            .expect("offsets")
            .iter()
            .map(|o| (o.partition.get(), o.offset))
            .collect::<Vec<_>>()
    };
    assert_eq!(offsets("billing").await, [(0, 8)]);
    assert_eq!(offsets("audit").await, [(1, 3)]);
    // An entry naming a partition that does not exist fails the whole batch.
    let (good, missing) = (commit("orders", 1, 50), commit("orders", 9, 1));
    let bad = store
        .commit_offsets_batch(&[("billing", &good), ("billing", &missing)], 200)
        .await;
    assert!(
        matches!(bad, Err(StoreError::PartitionNotFound { .. })),
        "{bad:?}"
    );
    assert_eq!(
        offsets("billing").await,
        [(0, 8)],
        "the failed batch wrote nothing"
    );
    // Many rows: more than one statement's worth.
    let many: Vec<OffsetCommit> = (0..1_200)
        .map(|i| commit("orders", i % 2, u64::from(i)))
        .collect();
    let entries: Vec<(&str, &OffsetCommit)> = many.iter().map(|c| ("bulk", c)).collect();
    store
        .commit_offsets_batch(&entries, 300)
        .await
        .expect("a large batch");
    assert_eq!(offsets("bulk").await, [(0, 1_198), (1, 1_199)]);

    assert_eq!(store.delete_group("billing").await.expect("delete"), 1);
    assert_eq!(store.delete_group("billing").await.expect("delete"), 0);
    assert!(offsets("billing").await.is_empty());
    assert_eq!(offsets("audit").await, [(1, 3)], "other groups stay");
}

async fn read_replicas_and_the_scaling_policy_are_kept(store: &SqlStore) {
    assert_eq!(
        store.scaling_policy().await.expect("policy"),
        ScalingPolicy::default()
    );
    let policy = ScalingPolicy {
        min_replicas: 2,
        max_replicas: 20,
        target_bytes_per_second: 1 << 30,
        target_consumers: 50,
        hysteresis_percent: 10,
        scale_up_cooldown_ms: 1_000,
        scale_down_cooldown_ms: 2_000,
    };
    store.set_scaling_policy(&policy).await.expect("set");
    assert_eq!(store.scaling_policy().await.expect("policy"), policy);

    let mut replica = ReadReplicaInfo {
        replica_id: "replica-b".to_owned(),
        endpoint: Endpoint::new("10.0.0.2:7100").expect("endpoint"),
        zone: None,
        state: ReadReplicaState::Live,
        lease_expires_at_ms: 5_000,
        bytes_served_per_second: 1_000,
        consumers: 3,
        fetch_latency_p99_us: 2_500,
        cache_hit_ratio_permille: 950,
        build: None,
    };
    store.upsert_read_replica(&replica).await.expect("insert");
    replica.consumers = 4;
    store.upsert_read_replica(&replica).await.expect("update");
    let other = ReadReplicaInfo {
        replica_id: "replica-a".to_owned(),
        build: Some(build(7100)),
        ..replica.clone()
    };
    store.upsert_read_replica(&other).await.expect("insert");
    let listed = store.read_replicas().await.expect("list");
    assert_eq!(listed, [other, replica]);
}

fn replica_registration(id: Option<&str>, port: u16, expires: u64) -> ReadReplicaRegistration {
    ReadReplicaRegistration {
        id: id.map(str::to_owned),
        endpoint: Endpoint::new(format!("127.0.0.1:{port}")).expect("endpoint"),
        zone: None,
        build: Some(build(port)),
        lease_expires_at_ms: expires,
    }
}

async fn read_replicas_register_heartbeat_drain_expire_and_leave(store: &SqlStore) {
    let first = store
        .register_read_replica(&replica_registration(None, 7500, 1_000))
        .await
        .expect("register");
    let second = store
        .register_read_replica(&replica_registration(None, 7501, 1_000))
        .await
        .expect("register");
    assert_eq!(
        (first.replica_id.as_str(), second.replica_id.as_str()),
        ("r-1", "r-2")
    );
    assert_eq!(first.state, ReadReplicaState::Live);
    assert_eq!(first.build, Some(build(7500)));
    // A name a driver chose is kept; an assigned id skips one that is taken.
    store
        .register_read_replica(&replica_registration(Some("r-3"), 7502, 1_000))
        .await
        .expect("register by id");
    let fourth = store
        .register_read_replica(&replica_registration(None, 7503, 1_000))
        .await
        .expect("register");
    assert_eq!(fourth.replica_id, "r-4");

    let load = ReadReplicaHeartbeat {
        bytes_served_per_second: 5_000,
        consumers: 7,
        fetch_latency_p99_us: 1_200,
        cache_hit_ratio_permille: 990,
    };
    let renewed = store
        .renew_read_replica("r-1", 2_000, &load)
        .await
        .expect("renew");
    assert_eq!(renewed.lease_expires_at_ms, 2_000);
    assert_eq!(
        (renewed.bytes_served_per_second, renewed.consumers),
        (5_000, 7)
    );
    assert_eq!(
        (
            renewed.fetch_latency_p99_us,
            renewed.cache_hit_ratio_permille
        ),
        (1_200, 990)
    );
    assert!(matches!(
        store.renew_read_replica("r-9", 2_000, &load).await,
        Err(StoreError::ReadReplicaNotFound { .. })
    ));

    let drained = store.drain_read_replica("r-2").await.expect("drain");
    assert_eq!(drained.state, ReadReplicaState::Draining);
    assert!(matches!(
        store.drain_read_replica("r-9").await,
        Err(StoreError::ReadReplicaNotFound { .. })
    ));

    // r-1 renewed to 2 000; the others lapse at 1 000.
    let expired = store
        .expire_read_replica_leases(1_000)
        .await
        .expect("expire");
    assert_eq!(expired, ["r-2", "r-3", "r-4"]);
    assert!(matches!(
        store.renew_read_replica("r-3", 3_000, &load).await,
        Err(StoreError::ReadReplicaLeaseExpired { .. })
    ));
    // Registering again revives a dead replica with its id.
    let back = store
        .register_read_replica(&replica_registration(Some("r-3"), 7502, 3_000))
        .await
        .expect("register again");
    assert_eq!(back.state, ReadReplicaState::Live);

    let forgotten = store.forget_dead_read_replicas(999).await.expect("forget");
    assert!(forgotten.is_empty(), "expired at 1 000, not by 999");
    let forgotten = store
        .forget_dead_read_replicas(1_000)
        .await
        .expect("forget");
    assert_eq!(forgotten, ["r-2", "r-4"]);

    store.remove_read_replica("r-3").await.expect("leave");
    assert!(matches!(
        store.remove_read_replica("r-3").await,
        Err(StoreError::ReadReplicaNotFound { .. })
    ));
    let left: Vec<String> = store
        .read_replicas()
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.replica_id)
        .collect();
    assert_eq!(left, ["r-1"]);
    // Ids are never reused, even after their replica is forgotten.
    let fifth = store
        .register_read_replica(&replica_registration(None, 7504, 9_000))
        .await
        .expect("register");
    assert_eq!(fifth.replica_id, "r-5");
}

async fn a_replicated_partition_elects_its_leader_once_per_epoch(store: &SqlStore) {
    three_brokers(store).await;
    store
        .create_stream(&stream("orders", 1, 3), &[ids(&[1, 2, 3])])
        .await
        .expect("create");
    let leadership = store
        .partition_leadership(&name("orders"), PartitionId::new(0))
        .await
        .expect("leadership");
    assert_eq!(
        (leadership.epoch, leadership.electing),
        (LeaderEpoch::new(1), true)
    );
    assert_eq!(leadership.leader, None);
    assert_eq!(leadership.replication_factor, 3);
    let live = |id| (BrokerId::new(id), BrokerState::Live);
    assert_eq!(leadership.replicas, [live(1), live(2), live(3)]);
    let assignment = &store
        .assignments(BrokerId::new(3))
        .await
        .expect("ok")
        .streams[0];
    assert!(assignment.partitions[0].electing);
    let leaderless = store.leaderless_partitions().await.expect("leaderless");
    assert_eq!(leaderless, [leadership]);

    let result = |epoch, leader| ElectionResult {
        stream: name("orders"),
        partition: PartitionId::new(0),
        epoch,
        leader: BrokerId::new(leader),
    };
    let before = store.assignment_version().await.expect("version");
    let stale = store.elect_leader(&result(LeaderEpoch::new(0), 2)).await;
    assert!(
        matches!(stale, Err(StoreError::EpochConflict { .. })),
        "{stale:?}"
    );
    let version = store
        .elect_leader(&result(LeaderEpoch::new(1), 2))
        .await
        .expect("elect");
    assert_eq!(version, before + 1);
    let twice = store.elect_leader(&result(LeaderEpoch::new(1), 3)).await;
    assert!(
        matches!(twice, Err(StoreError::EpochConflict { .. })),
        "decided once"
    );
    let led = store
        .partition_leadership(&name("orders"), PartitionId::new(0))
        .await
        .expect("leadership");
    assert_eq!(
        (led.epoch, led.electing, led.leader),
        (LeaderEpoch::new(1), false, Some(BrokerId::new(2)))
    );
    assert!(
        !store
            .assignments(BrokerId::new(3))
            .await
            .expect("ok")
            .streams[0]
            .partitions[0]
            .electing
    );
    assert!(store.leaderless_partitions().await.expect("ok").is_empty());

    let missing = store
        .partition_leadership(&name("orders"), PartitionId::new(1))
        .await;
    assert!(
        matches!(missing, Err(StoreError::PartitionNotFound { .. })),
        "{missing:?}"
    );
    let unknown = store
        .partition_leadership(&name("nowhere"), PartitionId::new(0))
        .await;
    assert!(
        matches!(unknown, Err(StoreError::StreamNotFound { .. })),
        "{unknown:?}"
    );
}

async fn a_leader_that_is_not_live_leaves_its_partition_leaderless(store: &SqlStore) {
    three_brokers(store).await;
    store
        .create_stream(&stream("orders", 2, 3), &[ids(&[1, 2, 3]), ids(&[2, 3, 1])])
        .await
        .expect("create");
    store
        .create_stream(&stream("audit", 1, 1), &[ids(&[1])])
        .await
        .expect("create");
    elect_first_replicas(store, "orders", &[ids(&[1, 2, 3]), ids(&[2, 3, 1])]).await;
    store
        .renew_lease(BrokerId::new(1), 1)
        .await
        .expect("shorten the lease");
    store.expire_leases(2).await.expect("expire");
    let leaderless = store.leaderless_partitions().await.expect("leaderless");
    assert_eq!(
        leaderless.len(),
        1,
        "not the partition led by 2, nor the unreplicated one"
    );
    assert_eq!(leaderless[0].partition, PartitionId::new(0));
    assert_eq!(leaderless[0].leader, Some(BrokerId::new(1)));
    assert_eq!(
        leaderless[0].replicas[0],
        (BrokerId::new(1), BrokerState::Dead)
    );

    let start = |expected_epoch, epoch| ElectionStart {
        stream: name("orders"),
        partition: PartitionId::new(0),
        expected_epoch: LeaderEpoch::new(expected_epoch),
        epoch: LeaderEpoch::new(epoch),
    };
    let before = store.assignment_version().await.expect("version");
    let stale = store.start_elections(&[start(1, 2), start(0, 1)]).await;
    assert!(
        matches!(
            stale,
            Err(StoreError::EpochConflict {
                expected: LeaderEpoch::ZERO,
                ..
            })
        ),
        "{stale:?}"
    );
    assert_eq!(
        store.assignment_version().await.expect("version"),
        before,
        "all or none"
    );
    let version = store.start_elections(&[start(1, 5)]).await.expect("start");
    assert_eq!(version, before + 1);
    let electing = store
        .partition_leadership(&name("orders"), PartitionId::new(0))
        .await
        .expect("leadership");
    assert_eq!(
        (electing.epoch, electing.electing, electing.leader),
        (LeaderEpoch::new(5), true, None)
    );
    let members: Vec<BrokerId> = electing.replicas.iter().map(|(id, _)| *id).collect();
    assert_eq!(members, ids(&[1, 2, 3]), "the same replica set");
    let described = store
        .describe_stream(&name("orders"))
        .await
        .expect("ok")
        .expect("exists");
    assert!(described.partitions[0].electing);
}

async fn the_next_lease_expiry_is_the_earliest_of_brokers_not_dead(store: &SqlStore) {
    assert_eq!(store.next_lease_expiry().await.expect("ok"), None);
    for (port, expires) in [(7100, 5_000), (7200, 9_000)] {
        store
            .register_broker(&registration(None, port, expires))
            .await
            .expect("register");
    }
    assert_eq!(store.next_lease_expiry().await.expect("ok"), Some(5_000));
    store.expire_leases(5_000).await.expect("expire");
    assert_eq!(store.next_lease_expiry().await.expect("ok"), Some(9_000));
}

async fn a_controlplane_taking_over_extends_the_leases_of_brokers_not_dead(store: &SqlStore) {
    for (port, expires) in [(7100, 2_000), (7200, 5_000), (7300, 9_000)] {
        store
            .register_broker(&registration(None, port, expires))
            .await
            .expect("register");
    }
    assert_eq!(store.expire_leases(2_000).await.expect("expire"), ids(&[1]));
    store.extend_leases(6_000).await.expect("extend");
    let leases: Vec<(u32, BrokerState, u64)> = store
        .brokers()
        .await
        .expect("list")
        .iter()
        .map(|b| (b.broker_id.get(), b.state, b.lease_expires_at_ms))
        .collect();
    assert_eq!(
        leases,
        [
            (1, BrokerState::Dead, 2_000),
            (2, BrokerState::Live, 6_000),
            (3, BrokerState::Live, 9_000),
        ],
        "a dead broker stays dead, a longer lease is kept"
    );
    assert!(store.expire_leases(5_999).await.expect("expire").is_empty());
    assert_eq!(store.expire_leases(6_000).await.expect("expire"), ids(&[2]));
}

async fn principals_are_created_rotated_listed_and_revoked(store: &SqlStore) {
    assert_eq!(store.principals_version().await.expect("ok"), 0);
    let ci = Principal {
        name: "ci".to_owned(),
        kind: PrincipalKind::User,
        grants: vec![
            "publish:builds".parse().expect("grant"),
            "consume:logs-*".parse().expect("grant"),
        ],
        broker_id: None,
    };
    let first = mint_token([1; 40]);
    let version = store
        .create_principal(&ci, &first.key, 10)
        .await
        .expect("create");
    assert_eq!(version, 1);
    let taken = store
        .create_principal(&ci, &mint_token([2; 40]).key, 11)
        .await;
    assert!(
        matches!(taken, Err(StoreError::PrincipalExists { .. })),
        "{taken:?}"
    );
    let replica = Principal {
        name: "replicas".to_owned(),
        kind: PrincipalKind::ReadReplica,
        grants: vec![],
        broker_id: None,
    };
    store
        .create_principal(&replica, &mint_token([3; 40]).key, 12)
        .await
        .expect("create");
    let second = mint_token([4; 40]);
    assert_eq!(
        store.add_token("ci", &second.key, 20).await.expect("add"),
        3
    );
    let missing = store
        .add_token("nobody", &mint_token([5; 40]).key, 21)
        .await;
    assert!(
        matches!(missing, Err(StoreError::PrincipalNotFound { .. })),
        "{missing:?}"
    );

    let (version, principals) = store.principals().await.expect("list");
    assert_eq!(version, 3);
    let names: Vec<&str> = principals
        .iter()
        .map(|p| p.principal.name.as_str())
        .collect();
    assert_eq!(names, ["ci", "replicas"]);
    assert_eq!(principals[0].principal, ci, "grants and kind kept");
    let keys: Vec<_> = principals[0].tokens.iter().map(|t| t.key.clone()).collect();
    assert_eq!(
        keys,
        [first.key.clone(), second.key.clone()],
        "oldest first, hashes kept"
    );
    assert_eq!(principals[0].tokens[1].created_at_ms, 20);
    assert_eq!(principals[1].principal.kind, PrincipalKind::ReadReplica);

    assert_eq!(
        store
            .revoke_token("ci", &first.key.key_id)
            .await
            .expect("revoke token"),
        4
    );
    let again = store.revoke_token("ci", &first.key.key_id).await;
    assert!(
        matches!(again, Err(StoreError::TokenNotFound { .. })),
        "{again:?}"
    );
    assert_eq!(store.revoke_principal("ci").await.expect("revoke"), 5);
    let gone = store.revoke_principal("ci").await;
    assert!(
        matches!(gone, Err(StoreError::PrincipalNotFound { .. })),
        "{gone:?}"
    );
    let (_, principals) = store.principals().await.expect("list");
    assert_eq!(principals.len(), 1);
    // The name is free again, and the old tokens are gone with it.
    store
        .create_principal(&ci, &mint_token([6; 40]).key, 30)
        .await
        .expect("recreate");
    let (_, principals) = store.principals().await.expect("list");
    assert_eq!(principals[0].tokens.len(), 1);

    // A broker bound to its id keeps the binding; an unbound one has none.
    let bound = Principal {
        name: "broker-7".to_owned(),
        kind: PrincipalKind::Broker,
        grants: vec![],
        broker_id: Some(BrokerId::new(7)),
    };
    let unbound = Principal {
        name: "broker-any".to_owned(),
        broker_id: None,
        ..bound.clone()
    };
    for (principal, seed) in [(&bound, 7), (&unbound, 8)] {
        store
            .create_principal(principal, &mint_token([seed; 40]).key, 40)
            .await
            .expect("create a broker principal");
    }
    let (_, principals) = store.principals().await.expect("list");
    let stored = |name: &str| {
        principals
            .iter()
            .find(|p| p.principal.name == name)
            .map(|p| p.principal.clone())
            .expect("listed")
    };
    assert_eq!(stored("broker-7"), bound, "the broker id is kept");
    assert_eq!(stored("broker-any"), unbound);
}

#[tokio::test]
async fn reopening_a_sqlite_store_keeps_its_data_and_migrates_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("meta.db");
    let store = SqlStore::open_sqlite(&path).await.expect("open");
    store
        .create_stream(&stream("kept", 1, 1), &[vec![]])
        .await
        .expect("create");
    store.close().await;
    let reopened = SqlStore::open_sqlite(&path).await.expect("reopen");
    assert_eq!(reopened.streams().await.expect("list").len(), 1);
}
