//! The mirror gateway and its store of copies (local or S3).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use httpdns_catalog::Catalog;

use crate::{Config, MirrorStore};

/// The mirror, following the catalog's rules and styles, with any prefetch a crash left running
/// resumed.
pub(crate) fn start(
    config: &Config,
    nofile: u64,
    prometheus: &prometheus::Registry,
    catalog: &Catalog,
) -> anyhow::Result<Arc<httpdns_mirror::Mirror>> {
    let mirror = Arc::new(
        httpdns_mirror::Mirror::new(
            mirror_objects(config, nofile).context("opening the mirror's object store")?,
            httpdns_mirror::MirrorMetrics::new(prometheus),
        )
        .allowing_local_origins(config.allow_local_origins)
        .with_images(config.mirror_images.clone())
        .with_prefetch_dir(config.data_dir.join("mirror").join("prefetch")),
    );
    tracing::info!(store = mirror.objects.backend_name(), "Mirror store ready.");
    if let Some(cap) = mirror.objects.cap() {
        prometheus.register(cap.collector()).context("registering the store cap's metrics")?;
    }
    mirror.follow(catalog.mirror_rules(), catalog.image_styles());
    // After the rules are in: a job a crash left running goes on.
    mirror.resume_prefetches();
    Ok(mirror)
}

/// The mirror's store of copies, as configured, with the process's descriptor limit `nofile`.
/// Fills are staged under the data directory.
fn mirror_objects(config: &Config, nofile: u64) -> anyhow::Result<httpdns_mirror::Objects> {
    let tmp = config.data_dir.join("mirror").join("tmp");
    match &config.mirror_store {
        MirrorStore::Local => {
            let root = local_objects_dir(config);
            // Copies of layout version 1 (`objects/`, where a key and its children collided)
            // move into the current layout once; a crash mid-way resumes at the next start.
            let legacy = config.data_dir.join("mirror").join("objects");
            let moved = httpdns_mirror::layout::migrate_v1(&legacy, &root)
                .context("moving stored copies to the current layout")?;
            if moved > 0 {
                tracing::info!(copies = moved, "Moved stored copies to the current store layout.");
            }
            // Large bodies in memory keep their files open (sent with sendfile): connections
            // may take half of the descriptors, these a quarter.
            let open_files = usize::try_from(nofile / 4).unwrap_or(usize::MAX).min(1 << 14);
            let objects = httpdns_mirror::Objects::local(&root, tmp)?
                .with_memory(config.mirror_memory)
                .with_sendfile(if config.mirror_sendfile { open_files } else { 0 });
            Ok(match config.mirror_max_bytes {
                Some(max) => objects.with_cap(max)?,
                None => objects,
            })
        }
        MirrorStore::S3 { .. } => {
            Ok(httpdns_mirror::Objects::remote(s3_objects(config)?, tmp)?.with_memory(config.mirror_memory))
        }
    }
}

/// Where the local mirror store keeps its copies (also what `httpdns backup` copies).
pub(crate) fn local_objects_dir(config: &Config) -> PathBuf {
    config.data_dir.join("mirror").join("store")
}

/// The configured S3 bucket (under its prefix) of the mirror's copies.
pub(crate) fn s3_objects(config: &Config) -> anyhow::Result<Arc<dyn object_store::ObjectStore>> {
    let MirrorStore::S3 { bucket, prefix, endpoint, region } = &config.mirror_store else {
        anyhow::bail!("the mirror store is not S3");
    };
    install_crypto_provider();
    let mut builder =
        object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket).with_region(region);
    if let Some(e) = endpoint {
        builder = builder.with_endpoint(e).with_allow_http(e.starts_with("http://"));
    }
    let s3 = builder.build().context("configuring the S3 store")?;
    Ok(if prefix.is_empty() {
        Arc::new(s3)
    } else {
        Arc::new(object_store::prefix::PrefixStore::new(s3, prefix.as_str()))
    })
}

/// Makes ring the process's TLS crypto provider unless one is installed already.
///
/// reqwest (the S3 store's client, health checks) is built without a bundled provider: the
/// workspace uses ring, and reqwest's `rustls` feature would compile aws-lc-rs beside it.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
