//! The object-store behaviour Floe relies on, checked against every backend: the local
//! directory in every run, an S3-compatible server when `FLOE_TEST_S3_ENDPOINT` is set.

mod common;

use bytes::Bytes;
use floe_tier::{CreateOutcome, TierError, TierStore};

async fn put_if_absent_creates_once(store: &TierStore) {
    let key = "s/0/manifest/00000000000000000001.json";
    let first = store.put_if_absent(key, Bytes::from_static(b"one")).await;
    assert_eq!(first.expect("put"), CreateOutcome::Created);
    let second = store.put_if_absent(key, Bytes::from_static(b"two")).await;
    assert_eq!(second.expect("put"), CreateOutcome::AlreadyExists);
    assert_eq!(
        store.get(key).await.expect("get"),
        Bytes::from_static(b"one")
    );
}

async fn put_if_absent_race_has_one_winner(store: &TierStore) {
    let key = "s/0/manifest/00000000000000000002.json";
    let racers = (0..8u8).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            let outcome = store.put_if_absent(key, Bytes::from(vec![i; 16])).await;
            (i, outcome.expect("put"))
        })
    });
    let mut winners = Vec::new();
    for racer in racers {
        let (i, outcome) = racer.await.expect("join");
        if outcome == CreateOutcome::Created {
            winners.push(i);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one racer creates the object");
    let stored = store.get(key).await.expect("get");
    assert_eq!(stored, Bytes::from(vec![winners[0]; 16]));
}

async fn ranged_and_tail_gets(store: &TierStore) {
    let key = "s/0/segments/ranged";
    let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    store
        .put(key, Bytes::from(data.clone()))
        .await
        .expect("put");
    let range = store.get_range(key, 100..356).await.expect("range");
    assert_eq!(&range[..], &data[100..356]);
    let (tail, size) = store.get_tail(key, 64).await.expect("tail");
    assert_eq!(size, 10_000);
    assert_eq!(&tail[..], &data[10_000 - 64..]);
    let (all, size) = store
        .get_tail(key, 1 << 20)
        .await
        .expect("tail longer than the object");
    assert_eq!((all.len(), size), (10_000, 10_000));
    let missing = store.get_range("s/0/segments/missing", 0..10).await;
    assert!(
        matches!(missing, Err(TierError::NotFound { .. })),
        "{missing:?}"
    );
}

async fn list_is_by_whole_path_segment(store: &TierStore) {
    for key in ["ab/0/x", "ab/1/y", "abc/0/z"] {
        store.put(key, Bytes::from_static(b"v")).await.expect("put");
    }
    let mut keys: Vec<_> = store
        .list("ab")
        .await
        .expect("list")
        .into_iter()
        .map(|o| o.key)
        .collect();
    keys.sort();
    assert_eq!(keys, ["ab/0/x", "ab/1/y"]);
    let listed = store.list("ab/0").await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].size, 1);
    assert!(listed[0].last_modified_ms > 0);
}

async fn delete_is_idempotent(store: &TierStore) {
    let key = "d/0/segments/gone";
    store.put(key, Bytes::from_static(b"v")).await.expect("put");
    store.delete(key).await.expect("delete");
    assert!(matches!(
        store.get(key).await,
        Err(TierError::NotFound { .. })
    ));
    store
        .delete(key)
        .await
        .expect("deleting a missing object succeeds");
}

async fn multipart_upload_is_invisible_until_finished(store: &TierStore) {
    let key = "m/0/segments/big";
    let part: Vec<u8> = (0..=250u8).cycle().take(6 * 1024 * 1024).collect();
    let mut writer = store.put_multipart(key).await.expect("start");
    for _ in 0..3 {
        writer.write(&part).await.expect("write");
    }
    writer.write(b"tail").await.expect("write");
    writer.finish().await.expect("finish");
    let (tail, size) = store.get_tail(key, 4).await.expect("tail");
    assert_eq!(size, 3 * part.len() as u64 + 4);
    assert_eq!(&tail[..], b"tail");
    let middle = store
        .get_range(key, part.len() as u64 - 2..part.len() as u64 + 2)
        .await
        .expect("range");
    assert_eq!(
        &middle[..],
        &[part[part.len() - 2], part[part.len() - 1], part[0], part[1]]
    );

    let aborted = "m/0/segments/aborted";
    let mut writer = store.put_multipart(aborted).await.expect("start");
    writer.write(&part).await.expect("write");
    writer.abort().await.expect("abort");
    assert!(matches!(
        store.get(aborted).await,
        Err(TierError::NotFound { .. })
    ));
}

async fn run_suite(store: &TierStore) {
    put_if_absent_creates_once(store).await;
    put_if_absent_race_has_one_winner(store).await;
    ranged_and_tail_gets(store).await;
    list_is_by_whole_path_segment(store).await;
    delete_is_idempotent(store).await;
    multipart_upload_is_invisible_until_finished(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_store_conformance() {
    for test_store in common::stores().await {
        eprintln!("conformance against {}", test_store.name);
        run_suite(&test_store.store).await;
    }
}

#[test]
fn unsupported_urls_are_configuration_errors() {
    let settings = floe_tier::S3Settings::default();
    for url in ["gopher://x/y", "s3:///nobucket", "not a url"] {
        let result = TierStore::open(url, &settings);
        assert!(
            matches!(result, Err(TierError::Config(_))),
            "{url}: {result:?}"
        );
    }
}
