//! The service's tools over the Model Context Protocol (the official Rust SDK, `rmcp`), so an
//! agent reaches the live repair memory the way it reaches its other tools.
//!
//! | tool | arguments | answer |
//! |---|---|---|
//! | `list_databases` | | the databases the key may use |
//! | `ask` | `database`, `question`, `evidence`?, `sql`? | the answer: SQL, rows, attempts, memories used with scores, the episode to give feedback on |
//! | `give_feedback` | `database`, `episode`, `kind` (`confirm`/`reject`/`correct`), `sql`? | the finalization |
//! | `search_memory` | `database`, `query`, `limit`? | the best-matching memories with their BM25 scores |
//! | `list_memories` | `database`, `retired`? | memories |
//! | `get_memory` | `database`, `id` | one memory |
//! | `retire_memory` | `database`, `id`, `reason` | the memory |
//! | `restore_memory` | `database`, `id` | the memory |
//! | `memory_stats` | `database` | counts |
//!
//! Tenancy is `merit serve`'s: every call acts as the tenant of one API key and only on the
//! databases that key names. Over stdio (`merit mcp`) the key is given once at start-up; over
//! streamable HTTP (`/mcp` beside the JSON API) every request carries `Authorization: Bearer
//! <key>`, a request without a known key is answered 401 before the protocol sees it, and each
//! tool call acts as the key of its own request. What the service refuses (a database outside
//! the key's scope, feedback on a finalized episode, an empty question) comes back as a tool
//! error whose text is the service's message, so the agent can read and correct it.

use crate::api::off_runtime;
use crate::service::{Caller, Service, ServiceError};
use axum::http::request::Parts;
use merit_live::UserFeedback;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Extensions, ServerCapabilities, ServerConfig};
use rmcp::schemars::{self, JsonSchema};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{tool, tool_handler, tool_router, ErrorData};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The MCP server over a [`Service`]: one per stdio connection or HTTP session.
#[derive(Clone)]
pub struct MeritMcp {
    service: Arc<Service>,
    /// The caller of every tool call (stdio); `None` reads the key of each HTTP request.
    caller: Option<Caller>,
    tool_router: ToolRouter<MeritMcp>,
}

/// Arguments naming a database.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DatabaseArgs {
    /// The database, as `list_databases` names it.
    pub database: String,
}

/// Arguments of `ask`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskArgs {
    /// The database to ask.
    pub database: String,
    /// The question in natural language.
    pub question: String,
    /// Extra knowledge the question needs (BIRD's evidence), if any.
    #[serde(default)]
    pub evidence: String,
    /// SQL to run and repair instead of letting the model write the first query.
    #[serde(default)]
    pub sql: Option<String>,
}

/// Arguments of `give_feedback`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedbackArgs {
    /// The database the answer came from.
    pub database: String,
    /// The episode of the answer (from `ask`).
    pub episode: u64,
    /// `confirm` (the answer is right), `reject` (it is wrong) or `correct` (it is wrong and
    /// `sql` is right).
    pub kind: String,
    /// The right SQL, with `correct` only.
    #[serde(default)]
    pub sql: Option<String>,
}

/// Arguments of `search_memory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// The database whose memory is searched.
    pub database: String,
    /// Words to look for in the memories' questions, SQL and errors.
    pub query: String,
    /// Most memories to return (1 to 100; default 10).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Arguments of `list_memories`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// The database whose memory is listed.
    pub database: String,
    /// `true`: only retired memories; `false`: only active ones; absent: all.
    #[serde(default)]
    pub retired: Option<bool>,
}

/// Arguments naming one memory.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryArgs {
    /// The database the memory belongs to.
    pub database: String,
    /// The memory's id.
    pub id: u64,
}

/// Arguments of `retire_memory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetireArgs {
    /// The database the memory belongs to.
    pub database: String,
    /// The memory's id.
    pub id: u64,
    /// Why it is retired (kept with it).
    pub reason: String,
}

/// A tool's answer: structured content (always a JSON object, as the protocol asks) and the
/// same JSON as text; a refusal is a tool error carrying the service's message.
fn answer<T: Serialize>(result: Result<T, ServiceError>, wrap: Option<&str>) -> CallToolResult {
    match result.and_then(|value| {
        serde_json::to_value(value).map_err(|e| ServiceError::BadRequest(e.to_string()))
    }) {
        Ok(value) => CallToolResult::structured(match wrap {
            Some(key) => serde_json::json!({ key: value }),
            None => value,
        }),
        Err(error) => CallToolResult::error(vec![ContentBlock::text(error.to_string())]),
    }
}

impl MeritMcp {
    /// A server whose every call acts as `caller` (stdio: the key given at start-up).
    pub fn for_caller(service: Arc<Service>, caller: Caller) -> MeritMcp {
        MeritMcp {
            service,
            caller: Some(caller),
            tool_router: MeritMcp::tool_router(),
        }
    }

    /// A server whose calls act as the key of their own HTTP request.
    pub fn per_request(service: Arc<Service>) -> MeritMcp {
        MeritMcp {
            service,
            caller: None,
            tool_router: MeritMcp::tool_router(),
        }
    }

    /// The caller of a tool call.
    fn caller(&self, extensions: &Extensions) -> Result<Caller, ServiceError> {
        if let Some(caller) = &self.caller {
            return Ok(caller.clone());
        }
        let authorization = extensions
            .get::<Parts>()
            .and_then(|parts| parts.headers.get(axum::http::header::AUTHORIZATION))
            .and_then(|value| value.to_str().ok());
        self.service.authenticate(authorization)
    }

    /// Runs `work` as the caller, off the async runtime (the service blocks on models and
    /// databases), and answers with its result.
    async fn call<T: Serialize + Send + 'static>(
        &self,
        extensions: &Extensions,
        wrap: Option<&'static str>,
        work: impl FnOnce(&Service, &Caller) -> Result<T, ServiceError> + Send + 'static,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = match self.caller(extensions) {
            Ok(caller) => caller,
            Err(error) => return Ok(answer::<()>(Err(error), None)),
        };
        let service = Arc::clone(&self.service);
        let result = off_runtime(move || work(&service, &caller))
            .await
            .ok_or_else(|| ErrorData::internal_error("the tool call failed", None))?;
        Ok(answer(result, wrap))
    }
}

#[tool_router]
impl MeritMcp {
    #[tool(description = "The databases this API key may ask and whose memory it may read.")]
    async fn list_databases(&self, extensions: Extensions) -> Result<CallToolResult, ErrorData> {
        self.call(&extensions, Some("databases"), |service, caller| {
            Ok(service.databases(caller))
        })
        .await
    }

    #[tool(
        description = "Answer a question on a database with SQL: the model writes a query (or \
                       `sql` is used), a query that fails is repaired from the database's \
                       error with the help of remembered repairs, and the answer holds the \
                       SQL, its rows, every attempt and the memories used with their scores. \
                       Give feedback on its `episode` afterwards so the memory learns."
    )]
    async fn ask(
        &self,
        Parameters(args): Parameters<AskArgs>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        self.call(&extensions, None, move |service, caller| {
            service.ask(
                caller,
                &args.database,
                &args.question,
                &args.evidence,
                args.sql.as_deref(),
            )
        })
        .await
    }

    #[tool(
        description = "Say whether an answer was right: `confirm`, `reject`, or `correct` \
                       with the right `sql` (which must execute). This finalizes the episode: \
                       a confirmed or corrected repair becomes a memory, and memories behind \
                       rejected answers are retired."
    )]
    async fn give_feedback(
        &self,
        Parameters(args): Parameters<FeedbackArgs>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        self.call(&extensions, None, move |service, caller| {
            let feedback = match (args.kind.as_str(), args.sql) {
                ("confirm", None) => UserFeedback::Confirm,
                ("reject", None) => UserFeedback::Reject,
                ("correct", Some(sql)) => UserFeedback::Correct { sql },
                ("correct", None) => {
                    return Err(ServiceError::BadRequest(
                        "feedback `correct` needs the right `sql`".into(),
                    ))
                }
                ("confirm" | "reject", Some(_)) => {
                    return Err(ServiceError::BadRequest(format!(
                        "feedback `{}` takes no `sql` (use `correct`)",
                        args.kind
                    )))
                }
                (other, _) => {
                    return Err(ServiceError::BadRequest(format!(
                        "unknown feedback kind {other:?}: use confirm, reject or correct"
                    )))
                }
            };
            service.feedback(caller, &args.database, args.episode, feedback)
        })
        .await
    }

    #[tool(
        description = "Search a database's repair memory for words of a question, SQL or \
                       error; the best matches first, each with its score."
    )]
    async fn search_memory(
        &self,
        Parameters(args): Parameters<SearchArgs>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        self.call(&extensions, Some("memories"), move |service, caller| {
            let limit = args.limit.unwrap_or(10);
            service.search_memories(caller, &args.database, &args.query, limit)
        })
        .await
    }

    #[tool(description = "List a database's repair memories, oldest first.")]
    async fn list_memories(
        &self,
        Parameters(args): Parameters<ListArgs>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        self.call(&extensions, Some("memories"), move |service, caller| {
            service.memories(caller, &args.database, args.retired)
        })
        .await
    }

    #[tool(description = "One repair memory: where it came from, its polarity and record.")]
    async fn get_memory(
        &self,
        Parameters(args): Parameters<MemoryArgs>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        self.call(&extensions, None, move |service, caller| {
            service.memory(caller, &args.database, args.id)
        })
        .await
    }

    #[tool(
        description = "Retire a repair memory so that no later repair retrieves it \
                       (reversible with restore_memory)."
    )]
    async fn retire_memory(
        &self,
        Parameters(args): Parameters<RetireArgs>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        self.call(&extensions, None, move |service, caller| {
            service.retire(caller, &args.database, args.id, &args.reason)
        })
        .await
    }

    #[tool(description = "Bring a retired repair memory back into retrieval.")]
    async fn restore_memory(
        &self,
        Parameters(args): Parameters<MemoryArgs>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        self.call(&extensions, None, move |service, caller| {
            service.restore(caller, &args.database, args.id)
        })
        .await
    }

    #[tool(description = "Counts over a database's memory: answers, repairs, memories, retired.")]
    async fn memory_stats(
        &self,
        Parameters(args): Parameters<DatabaseArgs>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        self.call(&extensions, None, move |service, caller| {
            service.stats(caller, &args.database)
        })
        .await
    }
}

#[tool_handler(router = self.tool_router)]
impl rmcp::ServerHandler for MeritMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "merit: Text-to-SQL that repairs failing queries from database errors and \
             remembers the repairs users confirm. Ask with `ask`, then tell it whether the \
             answer was right with `give_feedback`; inspect what it learned with the memory \
             tools.",
        )
    }
}

/// The streamable HTTP endpoint over `service` (mounted at `/mcp` by [`crate::api::router`]).
pub fn http_service(service: Arc<Service>) -> StreamableHttpService<MeritMcp, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default();
    // rmcp accepts loopback `Host` names only; the configuration adds the public ones.
    config
        .allowed_hosts
        .extend(service.config().mcp_hosts.iter().cloned());
    StreamableHttpService::new(
        move || Ok(MeritMcp::per_request(Arc::clone(&service))),
        Default::default(),
        config,
    )
}

/// Serves the tools over standard input and output as `caller` until the client closes the
/// connection, finalizing expired answers every `sweep` meanwhile. As with [`crate::serve`],
/// drop the last reference to `service` outside the async runtime.
pub async fn serve_stdio(
    service: Arc<Service>,
    caller: Caller,
    sweep: std::time::Duration,
) -> Result<(), String> {
    use rmcp::ServiceExt;
    let sweeper = crate::api::spawn_sweeper(Arc::clone(&service), sweep);
    let served = async {
        let running = MeritMcp::for_caller(service, caller)
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| format!("the MCP connection could not start: {e}"))?;
        running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| format!("the MCP connection failed: {e}"))
    }
    .await;
    sweeper.abort();
    served
}
