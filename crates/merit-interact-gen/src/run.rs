//! The resumable driver: targets → model drafts → verification → records or rejections.

use super::perturb::Target;
use super::record::{existing, AppendFile, GeneratedTask, RejectionLine, GEN_RECORD_FORMAT};
use super::request::{write_request, RequestConfig};
use super::revise::revise_request;
use super::verify::{verify, RejectReason};
use super::GenError;
use merit_core::model::ChatModel;
use merit_data::DatabaseSchema;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Settings of [`generate_tasks`].
#[derive(Debug, Clone, PartialEq)]
pub struct GenConfig {
    /// Model call settings.
    pub request: RequestConfig,
    /// Stop after this many new records in this run (`None`: all targets). Lets a background
    /// job produce a split in slices.
    pub max_new_records: Option<usize>,
    /// Give a well-formed draft that fails verification one revision with its faults named
    /// (see [`super::revise`]).
    pub revise: bool,
}

impl Default for GenConfig {
    fn default() -> GenConfig {
        GenConfig {
            request: RequestConfig::default(),
            max_new_records: None,
            revise: true,
        }
    }
}

/// What happened to one target in this run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetOutcome {
    /// Already in the output or rejection file; nothing was asked.
    AlreadyDone,
    /// A record was written.
    Written,
    /// Rejected for these reasons (logged).
    Rejected(Vec<RejectReason>),
    /// The database has no schema; skipped, not logged (a later run with the schema retries).
    NoSchema,
}

/// Totals of a generation run. `rejected` and `written` include what earlier runs logged, so
/// the figures describe the whole file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GenReport {
    /// Targets given.
    pub targets: usize,
    /// Targets skipped because an earlier run finished them.
    pub already_done: usize,
    /// Records in the output file after this run.
    pub written: usize,
    /// Records written by this run.
    pub written_now: usize,
    /// Rejected targets by first reason (each target counted once), all runs.
    pub rejected: BTreeMap<String, usize>,
    /// Rejected targets by every reason they failed (a target may count several times).
    pub rejected_any: BTreeMap<String, usize>,
    /// Targets whose database had no schema.
    pub no_schema: usize,
    /// Model calls made by this run.
    pub model_calls: u64,
    /// Calls that were retries after a malformed reply.
    pub retries: u64,
    /// Drafts that failed verification and were sent back once for revision.
    pub revisions: u64,
    /// Prompt tokens of this run.
    pub prompt_tokens: u64,
    /// Completion tokens of this run.
    pub completion_tokens: u64,
    /// Torn last lines that were cut off on open.
    pub warnings: Vec<String>,
}

/// The rejection log that goes with an output file: `<output>.rejected.jsonl`.
pub fn rejection_path(output: &Path) -> std::path::PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(".rejected.jsonl");
    name.into()
}

/// Writes a record for every target not yet done, in order.
///
/// `output` receives one [`GeneratedTask`] per verified target; `<output>.rejected.jsonl`
/// ([`rejection_path`]) one line per rejected target. Both are append-only with an fsync per
/// line, and a target whose id is in either file is skipped, so rerunning after a crash
/// continues where it stopped (with a reply cache, even the interrupted target's call is
/// free). A model backend failure stops the run with [`GenError::Model`] and logs nothing for
/// that target. `on_target` is called after each target (for progress display).
pub fn generate_tasks(
    targets: &[Target],
    schemas: &BTreeMap<String, DatabaseSchema>,
    model: &dyn ChatModel,
    output: &Path,
    config: &GenConfig,
    on_target: &mut dyn FnMut(&Target, &TargetOutcome),
) -> Result<GenReport, GenError> {
    let rejections = rejection_path(output);
    let found = existing(output, &rejections)?;
    let mut report = GenReport {
        targets: targets.len(),
        written: found.written,
        ..GenReport::default()
    };
    for (path, torn) in [
        (output, found.torn_output),
        (rejections.as_path(), found.torn_rejections),
    ] {
        if torn > 0 {
            report.warnings.push(format!(
                "{}: cut off an incomplete last line ({torn} bytes) left by an interrupted run",
                path.display()
            ));
        }
    }
    for line in &found.rejections {
        count(&mut report, &line.reasons);
    }
    let mut out = AppendFile::open(output, found.torn_output)?;
    let mut rejected_out = AppendFile::open(&rejections, found.torn_rejections)?;
    let model_id = model.id();
    for target in targets {
        if config
            .max_new_records
            .is_some_and(|max| report.written_now >= max)
        {
            break;
        }
        if found.done.contains(&target.target_id) {
            report.already_done += 1;
            on_target(target, &TargetOutcome::AlreadyDone);
            continue;
        }
        let Some(schema) = schemas.get(&target.db_id) else {
            report.no_schema += 1;
            on_target(target, &TargetOutcome::NoSchema);
            continue;
        };
        let outcome = write_request(model, target, schema, &config.request).map_err(|source| {
            GenError::Model {
                target_id: target.target_id.clone(),
                source,
            }
        })?;
        report.model_calls += u64::from(outcome.calls);
        report.retries += u64::from(outcome.calls.saturating_sub(1));
        report.prompt_tokens += outcome.prompt_tokens;
        report.completion_tokens += outcome.completion_tokens;
        let (mut reasons, mut detail) = match &outcome.draft {
            Ok(draft) => (verify(draft, &target.sql, schema), None),
            Err(error) => (vec![RejectReason::Malformed], Some(error.clone())),
        };
        let mut outcome = outcome;
        // A well-formed draft that fails verification gets one revision with its faults named.
        if let (Ok(draft), false, true) = (&outcome.draft, reasons.is_empty(), config.revise) {
            let revised = revise_request(model, target, schema, &config.request, draft, &reasons)
                .map_err(|source| GenError::Model {
                target_id: target.target_id.clone(),
                source,
            })?;
            report.model_calls += u64::from(revised.calls);
            report.revisions += 1;
            report.prompt_tokens += revised.prompt_tokens;
            report.completion_tokens += revised.completion_tokens;
            match &revised.draft {
                Ok(second) => {
                    reasons = verify(second, &target.sql, schema);
                    detail = None;
                    outcome = revised;
                }
                Err(error) => detail = Some(format!("the revision was malformed: {error}")),
            }
        }
        if let (Ok(draft), true) = (&outcome.draft, reasons.is_empty()) {
            out.append(&GeneratedTask::new(target, draft, &model_id))?;
            report.written += 1;
            report.written_now += 1;
            on_target(target, &TargetOutcome::Written);
        } else {
            rejected_out.append(&RejectionLine {
                format: GEN_RECORD_FORMAT.to_string(),
                target_id: target.target_id.clone(),
                reasons: reasons.clone(),
                detail,
                draft: outcome.draft.as_ref().ok().cloned(),
            })?;
            count(&mut report, &reasons);
            on_target(target, &TargetOutcome::Rejected(reasons));
        }
    }
    Ok(report)
}

fn count(report: &mut GenReport, reasons: &[RejectReason]) {
    if let Some(first) = reasons.first() {
        *report
            .rejected
            .entry(first.as_str().to_string())
            .or_default() += 1;
    }
    for reason in reasons {
        *report
            .rejected_any
            .entry(reason.as_str().to_string())
            .or_default() += 1;
    }
}
