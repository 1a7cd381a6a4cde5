//! The rubric process reward model of MERIT interact (paper 003, §5.3): how useful one
//! turn-level memory would be if it were shown to the agent in its current state.
//!
//! ```text
//! (TurnState σ_t, TurnMemory m) ──► state_text / memory_text ──► prm_rubric.txt
//!        ──► RubricJudge (teacher model, greedy, one retry) ──► Rubric or a recorded failure
//!        ──► annotate: append-only JSONL of teacher annotations (resumable)
//!        ──► merit-learn's student PRM is trained on them
//! Rubric ──► scalar_utility ──► f_PRM(σ_t, m), the dense reward of the turn-level selector
//! ```
//!
//! * [`rubric`]: the [`Rubric`] (seven principles scored 0–5 with a reason each, two flags,
//!   two texts), its strict reader [`parse_rubric`] and [`scalar_utility`].
//! * [`judge`]: the teacher [`RubricJudge`] and the texts it shows ([`state_text`],
//!   [`memory_text`]); prompt family `merit-interact-prm-v1`.
//! * [`annotate`](mod@annotate): the annotation file and its resumable driver [`annotate()`].

pub mod annotate;
pub mod judge;
pub mod rubric;

pub use annotate::{
    annotate, read_annotations, AnnotateError, AnnotateReport, AnnotationFile, AnnotationPair,
    AnnotationRecord, Judged, LoadedAnnotations, ANNOTATION_FORMAT,
};
pub use judge::{
    memory_text, prm_version, state_text, JudgeConfig, JudgeOutcome, RubricJudge, PRM_PROMPT_FAMILY,
};
pub use rubric::{
    parse_rubric, scalar_utility, Feedback, Flags, Judgement, Principle, Principles, Rubric,
    RubricError, MAX_SCORE, MAX_TEXT_CHARS,
};
