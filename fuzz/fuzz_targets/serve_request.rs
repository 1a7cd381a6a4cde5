//! `merit serve`'s request bodies through the real router (in process, no socket): any bytes
//! POSTed to `/v1/ask`, `/v1/feedback` or a memory's `/retire` get an answer with a status,
//! never a panic, and never a 5xx other than the model's 502 (the scripted model below never
//! fails, so a 5xx would be a service fault).
#![no_main]
use axum::body::Body;
use axum::http::Request;
use libfuzzer_sys::fuzz_target;
use merit_core::model::{ChatModel, ChatReply, ChatRequest, Embedder, ModelError};
use merit_memory::HashEmbedder;
use merit_serve::{hash_key, router, ServeConfig, Service, ServiceModels};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tower::ServiceExt;

const KEY: &str = "fuzz-key";

struct Fixed;

impl ChatModel for Fixed {
    fn id(&self) -> String {
        "fuzz:fixed".into()
    }

    fn chat(&self, _request: &ChatRequest) -> Result<ChatReply, ModelError> {
        Ok(ChatReply {
            text: "```sql\nSELECT Name FROM singer\n```".into(),
            prompt_tokens: 1,
            completion_tokens: 1,
            latency: Duration::ZERO,
            cached: false,
            tool_calls: Vec::new(),
        })
    }
}

/// One service for the whole fuzzing process (its state folder lives as long).
fn service() -> &'static (Arc<Service>, tokio::runtime::Runtime, tempfile::TempDir) {
    static SERVICE: OnceLock<(Arc<Service>, tokio::runtime::Runtime, tempfile::TempDir)> =
        OnceLock::new();
    SERVICE.get_or_init(|| {
        let state = tempfile::tempdir().expect("a state folder");
        let database = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/spider/database/concert_singer/concert_singer.sqlite"
        );
        let text = format!(
            "state_dir = {state:?}\n[[databases]]\nname = \"concert_singer\"\npath = \
             {database:?}\n[[keys]]\ntenant = \"fuzz\"\nsha256 = \"{}\"\ndatabases = \
             [\"concert_singer\"]\n",
            hash_key(KEY),
            state = state.path().display().to_string(),
        );
        let config = ServeConfig::parse(&text).expect("the configuration parses");
        let embedder: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(32));
        let models = ServiceModels {
            repair: Arc::new(Fixed),
            initial: None,
            embedder,
        };
        let service = Arc::new(Service::start(config, models).expect("the service starts"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        (service, runtime, state)
    })
}

fuzz_target!(|bytes: &[u8]| {
    let (service, runtime, _) = service();
    for path in [
        "/v1/ask",
        "/v1/feedback",
        "/v1/databases/concert_singer/memories/m0/retire",
    ] {
        let request = Request::builder()
            .method("POST")
            .uri(path)
            .header("authorization", format!("Bearer {KEY}"))
            .header("content-type", "application/json")
            .body(Body::from(bytes.to_vec()))
            .expect("a request");
        let response = runtime
            .block_on(router(Arc::clone(service)).oneshot(request))
            .expect("the router answers");
        let status = response.status().as_u16();
        assert!(status < 500 || status == 502, "{path} answered {status}");
    }
});
