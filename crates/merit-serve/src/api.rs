//! The HTTP JSON API (axum). Every route but `/v1/health` and the page needs
//! `Authorization: Bearer <key>`.
//!
//! | method | path | body | answer |
//! |---|---|---|---|
//! | GET | `/` | | the web page (no key needed to load it; it asks for one) |
//! | GET | `/v1/health` | | `{"status":"ok"}` |
//! | GET | `/v1/databases` | | the databases the key may use |
//! | POST | `/v1/ask` | `{"database","question","evidence"?,"sql"?}` | the answer: SQL, rows, attempts, memories used with scores |
//! | POST | `/v1/feedback` | `{"database","episode","feedback":{"kind":"confirm"\|"reject"\|"correct","sql"?}}` | the finalization |
//! | GET | `/v1/databases/{db}/memories?retired=` | | memories |
//! | GET | `/v1/databases/{db}/memories?q=<text>&limit=` | | the best matches, each with its `score` |
//! | GET | `/v1/databases/{db}/memories/{id}` | | one memory |
//! | POST | `/v1/databases/{db}/memories/{id}/retire` | `{"reason"}` | the memory |
//! | POST | `/v1/databases/{db}/memories/{id}/restore` | | the memory |
//! | GET | `/v1/databases/{db}/stats` | | counts |
//! | GET | `/v1/databases/{db}/timeline` | | per finalized episode: memories, confirmed, with feedback |
//! | POST/GET/DELETE | `/mcp` | MCP (streamable HTTP) | the same operations as MCP tools ([`crate::mcp`]) |
//!
//! Errors are `{"error": "<message>"}` with 400 (not JSON, an empty question, a bad id), 401
//! (no or unknown key), 403 (a database outside the key's scope, whether it exists or not),
//! 404 (unknown episode, memory or route), 409 (feedback on a finalized episode), 413 (body
//! over the limit), 422 (JSON of the wrong shape, e.g. an unknown field, or feedback that
//! cannot apply), 502 (the model failed), 503 (a memory whose journal could not be written, or
//! whose shared journal's server failed) or 500.

use crate::service::{Caller, Service, ServiceError};
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use merit_live::{LiveError, UserFeedback};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// An error as the API answers it.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            axum::Json(serde_json::json!({ "error": self.message })),
        )
            .into_response()
    }
}

impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> ApiError {
        let status = match &error {
            ServiceError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ServiceError::Forbidden(_) => StatusCode::FORBIDDEN,
            ServiceError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ServiceError::Live(live) => match live {
                LiveError::UnknownEpisode(_) | LiveError::UnknownMemory(_) => StatusCode::NOT_FOUND,
                LiveError::AlreadyFinalized(_) => StatusCode::CONFLICT,
                LiveError::Feedback(_) => StatusCode::UNPROCESSABLE_ENTITY,
                LiveError::Model(_) | LiveError::Repair(_) => StatusCode::BAD_GATEWAY,
                LiveError::Broken(_) | LiveError::Store { .. } => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
        };
        ApiError::new(status, error.to_string())
    }
}

/// A JSON body whose rejections (bad JSON, unknown fields, too large) answer in the API's
/// error shape, keeping their status (413 for a body over the limit).
struct Json<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(
        request: axum::extract::Request,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(Json(value)),
            Err(rejection) => Err(rejection_error(rejection)),
        }
    }
}

fn rejection_error(rejection: JsonRejection) -> ApiError {
    let status = rejection.status();
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "the request body is larger than the limit".to_string(),
        _ => rejection.body_text(),
    };
    ApiError::new(status, message)
}

/// Runs blocking work on a thread of its own, outside the async runtime; `None` when it
/// panicked.
///
/// Not on tokio's blocking pool: the synchronous PostgreSQL driver drives its own runtime and
/// refuses to run on a thread that belongs to another one (it panics), and model calls and
/// fsyncs are long enough that a thread per request costs nothing in comparison.
pub async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (send, receive) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = send.send(work());
    });
    receive.await.ok()
}

/// [`off_runtime`] for service work, its refusal as the API's error.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ServiceError> + Send + 'static,
) -> Result<T, ApiError> {
    off_runtime(work)
        .await
        .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the request failed"))?
        .map_err(ApiError::from)
}

fn caller(service: &Service, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let authorization = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    Ok(service.authenticate(authorization)?)
}

type Shared = State<Arc<Service>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AskBody {
    database: String,
    question: String,
    #[serde(default)]
    evidence: String,
    #[serde(default)]
    sql: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FeedbackBody {
    database: String,
    episode: u64,
    feedback: UserFeedback,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetireBody {
    #[serde(default)]
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    retired: Option<bool>,
    /// A search query: the best matches with their scores instead of the whole list.
    q: Option<String>,
    /// Most matches of a search (default 10).
    limit: Option<usize>,
}

#[derive(Serialize)]
struct Health {
    status: &'static str,
}

async fn health() -> axum::Json<Health> {
    axum::Json(Health { status: "ok" })
}

async fn databases(State(service): Shared, headers: HeaderMap) -> Result<Response, ApiError> {
    let caller = caller(&service, &headers)?;
    Ok(axum::Json(service.databases(&caller)).into_response())
}

async fn ask(
    State(service): Shared,
    headers: HeaderMap,
    Json(body): Json<AskBody>,
) -> Result<Response, ApiError> {
    let caller = caller(&service, &headers)?;
    let answer = blocking(move || {
        service.ask(
            &caller,
            &body.database,
            &body.question,
            &body.evidence,
            body.sql.as_deref(),
        )
    })
    .await?;
    Ok(axum::Json(answer).into_response())
}

async fn feedback(
    State(service): Shared,
    headers: HeaderMap,
    Json(body): Json<FeedbackBody>,
) -> Result<Response, ApiError> {
    let caller = caller(&service, &headers)?;
    let done =
        blocking(move || service.feedback(&caller, &body.database, body.episode, body.feedback))
            .await?;
    Ok(axum::Json(done).into_response())
}

async fn memories(
    State(service): Shared,
    headers: HeaderMap,
    Path(database): Path<String>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let caller = caller(&service, &headers)?;
    let Query(query) = query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    if let Some(text) = query.q {
        let limit = query.limit.unwrap_or(10);
        let found =
            blocking(move || service.search_memories(&caller, &database, &text, limit)).await?;
        return Ok(axum::Json(found).into_response());
    }
    let list = blocking(move || service.memories(&caller, &database, query.retired)).await?;
    Ok(axum::Json(list).into_response())
}

async fn memory(
    State(service): Shared,
    headers: HeaderMap,
    Path((database, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let caller = caller(&service, &headers)?;
    let id = memory_id(&id)?;
    let info = blocking(move || service.memory(&caller, &database, id)).await?;
    Ok(axum::Json(info).into_response())
}

async fn retire(
    State(service): Shared,
    headers: HeaderMap,
    Path((database, id)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let caller = caller(&service, &headers)?;
    let id = memory_id(&id)?;
    // The body is optional here: none, or `{"reason": "..."}`.
    let reason = if body.iter().all(u8::is_ascii_whitespace) {
        String::new()
    } else {
        serde_json::from_slice::<RetireBody>(&body)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("bad body: {e}")))?
            .reason
    };
    let reason = if reason.trim().is_empty() {
        "retired by an operator".to_string()
    } else {
        reason
    };
    let info = blocking(move || service.retire(&caller, &database, id, &reason)).await?;
    Ok(axum::Json(info).into_response())
}

async fn restore(
    State(service): Shared,
    headers: HeaderMap,
    Path((database, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let caller = caller(&service, &headers)?;
    let id = memory_id(&id)?;
    let info = blocking(move || service.restore(&caller, &database, id)).await?;
    Ok(axum::Json(info).into_response())
}

async fn stats(
    State(service): Shared,
    headers: HeaderMap,
    Path(database): Path<String>,
) -> Result<Response, ApiError> {
    let caller = caller(&service, &headers)?;
    let stats = blocking(move || service.stats(&caller, &database)).await?;
    Ok(axum::Json(stats).into_response())
}

/// A memory id as listings write it (`m12`) or bare (`12`).
fn memory_id(text: &str) -> Result<u64, ApiError> {
    text.strip_prefix('m').unwrap_or(text).parse().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("{text:?} is not a memory id (m<number>)"),
        )
    })
}

async fn timeline(
    State(service): Shared,
    headers: HeaderMap,
    Path(database): Path<String>,
) -> Result<Response, ApiError> {
    let caller = caller(&service, &headers)?;
    let points = blocking(move || service.timeline(&caller, &database)).await?;
    Ok(axum::Json(points).into_response())
}

/// The web page (one self-contained file; it calls this API with the key typed into it).
async fn page() -> axum::response::Html<&'static str> {
    axum::response::Html(include_str!("page.html"))
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such route; see GET /v1/health")
}

/// Lets an MCP request through only with a key the service knows (401 in the API's error
/// shape otherwise), so an unknown caller cannot even open a session.
async fn mcp_key(
    State(service): Shared,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match caller(&service, request.headers()) {
        Ok(_) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

/// The API's routes over `service`, with its body limit; the MCP endpoint (streamable HTTP,
/// [`crate::mcp`]) at `/mcp`.
pub fn router(service: Arc<Service>) -> Router {
    let limit = service.config().max_body_bytes;
    let mcp = Router::new()
        .nest_service("/mcp", crate::mcp::http_service(Arc::clone(&service)))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&service),
            mcp_key,
        ));
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/databases", get(databases))
        .route("/v1/ask", post(ask))
        .route("/v1/feedback", post(feedback))
        .route("/v1/databases/{db}/memories", get(memories))
        .route("/v1/databases/{db}/memories/{id}", get(memory))
        .route("/v1/databases/{db}/memories/{id}/retire", post(retire))
        .route("/v1/databases/{db}/memories/{id}/restore", post(restore))
        .route("/v1/databases/{db}/stats", get(stats))
        .route("/v1/databases/{db}/timeline", get(timeline))
        .route("/", get(page))
        .merge(mcp)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(service)
}

/// Finalizes expired answers every `sweep` until the returned task is aborted.
pub fn spawn_sweeper(
    service: Arc<Service>,
    sweep: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(sweep);
        loop {
            interval.tick().await;
            let service = Arc::clone(&service);
            let swept =
                blocking(move || service.finalize_expired().map_err(ServiceError::from)).await;
            if let Err(error) = swept {
                eprintln!(
                    "warning: finalizing expired answers failed: {}",
                    error.message
                );
            }
        }
    })
}

/// Serves the API on `listener` until `shutdown` resolves, finalizing expired answers every
/// `sweep` meanwhile. Keep a reference to `service` and drop it outside the async runtime: a
/// PostgreSQL database's connection cannot close inside one.
pub async fn serve(
    service: Arc<Service>,
    listener: tokio::net::TcpListener,
    sweep: std::time::Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let sweeper = spawn_sweeper(Arc::clone(&service), sweep);
    let served = axum::serve(listener, router(service))
        .with_graceful_shutdown(shutdown)
        .await;
    sweeper.abort();
    served
}
