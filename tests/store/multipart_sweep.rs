//! Issue 48, item 5: an unfinished multipart upload under the store's
//! `objects/` (what a process killed mid-upload leaves) is aborted by the
//! store's sweep once older than the age asked for, and counted; a
//! younger one and a completed object stay. Real Garage, in process.

use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStoreExt, PutPayload};
use talos_gen::store::{Location, S3Config, Store, UPLOAD_AGE};

use crate::support;
use crate::support::garage::Garage;

const PREFIX: &str = "mp";

#[test]
fn unfinished_uploads_are_aborted_by_the_sweep() {
    let Some(bin) = support::garage::binary() else {
        return;
    };
    let g = Garage::cluster(&bin, 1);
    let spool = tempfile::tempdir().unwrap();
    // S3Backend::open reads the credentials from the environment (the
    // Garage key is valid for every test of this binary).
    unsafe {
        std::env::set_var("AWS_ACCESS_KEY_ID", &g.key_id);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", &g.secret);
    }
    let loc = Location::S3(S3Config {
        bucket: g.bucket.clone(),
        prefix: PREFIX.into(),
        endpoint: Some(g.endpoint(0)),
        region: g.region.clone(),
        timeout: Duration::from_secs(10),
        spool: spool.path().to_path_buf(),
        local_tier: 0,
    });
    let store = Store::open_at(&loc, None).unwrap();

    // What a killed upload leaves: one part, never completed.
    let s3 = AmazonS3Builder::new()
        .with_bucket_name(&g.bucket)
        .with_region(&g.region)
        .with_endpoint(g.endpoint(0))
        .with_allow_http(true)
        .with_access_key_id(&g.key_id)
        .with_secret_access_key(&g.secret)
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let digest = "a".repeat(64);
    let done = format!("{PREFIX}/objects/sha256/{}", "b".repeat(64));
    rt.block_on(async {
        let p = ObjPath::from(format!("{PREFIX}/objects/sha256/{digest}"));
        let mut up = s3.put_multipart(&p).await.unwrap();
        up.put_part(PutPayload::from(vec![1u8; 1000]))
            .await
            .unwrap();
        drop(up);
    });
    g.put(0, &done, b"complete");

    let young = store.abort_stale_uploads(UPLOAD_AGE).unwrap();
    assert_eq!(
        (young.uploads, young.failed),
        (0, 0),
        "younger than the age: kept"
    );
    let old = store.abort_stale_uploads(Duration::ZERO).unwrap();
    assert_eq!((old.uploads, old.failed), (1, 0));
    assert_eq!(store.aborted_uploads(), 1);
    // Listed again: none left.
    let again = store.abort_stale_uploads(Duration::ZERO).unwrap();
    assert_eq!((again.uploads, again.failed), (0, 0));
    assert_eq!(
        g.list(0, &done),
        vec![done.clone()],
        "a completed object stays"
    );
}
