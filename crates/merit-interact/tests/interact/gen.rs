//! Task generation on real Spider databases with a scripted model.

use crate::common::{request_text, ScriptedModel};
use merit_core::model::{ChatRequest, Embedder, ModelError};
use merit_data::{load_tables, DatabaseDir, DatabaseSchema};
use merit_interact::gen::perturb::{PerturbKind, Target};
use merit_interact::gen::record::read_rejections;
use merit_interact::gen::run::rejection_path;
use merit_interact::gen::stats::tokenize;
use merit_interact::gen::verify::{find_leaks, find_term};
use merit_interact::gen::{
    compute_stats, generate_tasks, load_seeds, perturb_seeds, read_generated, self_bleu, verify,
    write_spider_metafiles, Draft, DraftAmbiguity, GenConfig, GeneratedTask, PerturbConfig,
    RejectReason, TargetOutcome,
};
use merit_interact::{ActionCall, EnvConfig, TaskSet};
use merit_sql::{Database, ExecLimits, SqliteDatabase};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn spider() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/spider")
}

fn schemas() -> BTreeMap<String, DatabaseSchema> {
    load_tables(spider().join("tables.json"))
        .expect("tables.json loads")
        .into_iter()
        .map(|s| (s.db_id.clone(), s))
        .collect()
}

fn databases() -> DatabaseDir {
    DatabaseDir::new(spider().join("database"))
}

/// Targets from the dev gold seeds of a few databases.
fn dev_targets(dbs: &[&str], config: &PerturbConfig) -> Vec<Target> {
    let seeds: Vec<_> = load_seeds(&spider().join("dev_gold.sql"), "dev")
        .expect("dev gold loads")
        .into_iter()
        .filter(|s| dbs.contains(&s.db_id.as_str()))
        .collect();
    perturb_seeds(&seeds, &schemas(), &databases(), config)
        .expect("perturbation runs")
        .0
}

#[test]
fn perturbation_yields_executable_non_empty_distinct_targets() {
    let seeds: Vec<_> = load_seeds(&spider().join("dev_gold.sql"), "dev")
        .expect("dev gold loads")
        .into_iter()
        .take(120)
        .collect();
    let config = PerturbConfig::default();
    let (targets, report) =
        perturb_seeds(&seeds, &schemas(), &databases(), &config).expect("perturbation runs");
    assert_eq!(report.seeds, 120);
    eprintln!("{report:?}");
    for t in targets.iter().take(12) {
        eprintln!("{} | {:?}", t.sql, t.perturbations);
    }
    assert!(targets.len() >= 60, "{report:?}");
    assert_eq!(report.kept, targets.len());
    // Every kind of operation produced something on real seeds.
    for kind in [
        PerturbKind::ColumnSwap,
        PerturbKind::NumericLiteral,
        PerturbKind::SortDirection,
        PerturbKind::Limit,
    ] {
        assert!(
            report.kept_by_kind.get(&kind).copied().unwrap_or(0) > 0,
            "{kind:?}: {report:?}"
        );
    }
    let mut ids = BTreeSet::new();
    let mut norms = BTreeSet::new();
    let dir = databases();
    for target in &targets {
        assert!(ids.insert(target.target_id.clone()), "duplicate id");
        let norm = merit_interact::gen::sqlast::canonical_query_text(&target.sql).expect("parses");
        assert!(norms.insert(norm.clone()));
        assert_ne!(
            merit_interact::gen::sqlast::canonical_query_text(&target.seed_sql),
            Some(norm),
            "a target must differ from its seed"
        );
        // Independently re-run: executes and has rows.
        let db = SqliteDatabase::open(dir.locate(&target.db_id).unwrap()).unwrap();
        let rows = db
            .query(
                &target.sql,
                &ExecLimits::with_timeout(Duration::from_secs(10)),
            )
            .unwrap_or_else(|e| panic!("{}: {e}", target.sql));
        assert!(!rows.rows.is_empty(), "{}", target.sql);
        assert!(!target.perturbations.is_empty());
    }
    // Column swaps never touch keys: no swap names an `_ID` column on either side.
    for target in &targets {
        for p in &target.perturbations {
            if p.kind == PerturbKind::ColumnSwap {
                assert!(
                    !p.detail.to_ascii_lowercase().contains("_id"),
                    "{}",
                    p.detail
                );
            }
        }
    }
    // Deterministic: the same seeds and RNG seed give the same targets; another seed differs.
    let (again, _) = perturb_seeds(&seeds, &schemas(), &databases(), &config).unwrap();
    assert_eq!(again, targets);
    let other = PerturbConfig { seed: 99, ..config };
    let (different, _) = perturb_seeds(&seeds, &schemas(), &databases(), &other).unwrap();
    assert_ne!(different, targets);
}

#[test]
fn train_json_seeds_load_with_stable_ids() {
    let seeds = load_seeds(&spider().join("train.json"), "train").expect("train.json loads");
    assert!(seeds.len() > 1000, "{}", seeds.len());
    assert_eq!(seeds[0].seed_id, "train-0");
    assert_eq!(
        seeds[seeds.len() - 1].seed_id,
        format!("train-{}", seeds.len() - 1)
    );
    assert!(seeds
        .iter()
        .all(|s| !s.sql.is_empty() && !s.db_id.is_empty()));
    assert!(load_seeds(&spider().join("tables.csv"), "x").is_err());
}

const SQL: &str =
    "SELECT Name, Country FROM singer WHERE Age > 30 AND Country = 'United_States' ORDER BY Age DESC LIMIT 3";

fn singer_schema() -> DatabaseSchema {
    schemas()["concert_singer"].clone()
}

fn amb(term: &str, snippet: &str, kind: &str) -> DraftAmbiguity {
    DraftAmbiguity {
        term: term.to_string(),
        sql_snippet: snippet.to_string(),
        kind: kind.to_string(),
    }
}

fn good_draft() -> Draft {
    Draft {
        clear_query: "List the name and home country of the three oldest singers over 30 from United_States, oldest first.".to_string(),
        amb_query: "Show me a few of the older singers from the US.".to_string(),
        ambiguities: vec![
            amb("older", "Age > 30", "semantic_ambiguity"),
            amb("a few", "LIMIT 3", "intent_ambiguity"),
            amb("older singers", "ORDER BY Age DESC", "sort_ambiguity"),
        ],
    }
}

#[test]
fn verification_accepts_a_good_draft_and_rejects_each_bad_case() {
    let schema = singer_schema();
    assert_eq!(verify(&good_draft(), SQL, &schema), vec![]);

    let check = |draft: Draft, reason: RejectReason| {
        let reasons = verify(&draft, SQL, &schema);
        assert!(reasons.contains(&reason), "{reason:?} not in {reasons:?}");
    };
    let mut d = good_draft();
    d.ambiguities[0].term = "elderly".to_string();
    check(d, RejectReason::TermNotInRequest);
    let mut d = good_draft();
    d.ambiguities[1].term = "A Few".to_string(); // case differs: found, stored as written
    assert_eq!(verify(&d, SQL, &schema), vec![]);
    assert_eq!(find_term(&d.amb_query, "A Few"), Some("a few"));
    assert_eq!(find_term("Straße und Weg", "STRASSE"), None);
    assert_eq!(find_term("Größe der Städte", "städte"), Some("Städte"));
    let mut d = good_draft();
    d.ambiguities[1].term = "a fee".to_string();
    check(d, RejectReason::TermNotInRequest);
    let mut d = good_draft();
    d.ambiguities[0].term = String::new();
    check(d, RejectReason::TermNotInRequest);
    let mut d = good_draft();
    d.ambiguities[0].sql_snippet = "age >= 30".to_string();
    check(d, RejectReason::SnippetNotInSql);
    let mut d = good_draft();
    d.ambiguities[1].sql_snippet = "  LIMIT\n3 ".to_string(); // whitespace runs collapse
    assert_eq!(verify(&d, SQL, &schema), vec![]);
    let mut d = good_draft();
    d.ambiguities.truncate(1);
    check(d, RejectReason::TooFewAmbiguities);
    let mut d = good_draft();
    let extra = d.ambiguities[0].clone();
    d.ambiguities.extend(std::iter::repeat_n(extra, 4));
    check(d, RejectReason::TooManyAmbiguities);
    let mut d = good_draft();
    let mut again = d.ambiguities[0].clone();
    again.term = format!(" {} ", again.term.to_uppercase());
    d.amb_query = format!("{} {}", d.amb_query, again.term.trim());
    d.ambiguities.push(again);
    check(d, RejectReason::DuplicateAmbiguity);
    let mut d = good_draft();
    d.amb_query = format!("{q} {q}", q = d.amb_query);
    check(d, RejectReason::DegenerateText);
    for meta in [
        " (I am not sure which one)",
        " (without the sort order, the row count or the attribute)",
        ", it is ambiguous",
    ] {
        let mut d = good_draft();
        d.amb_query.push_str(meta);
        check(d, RejectReason::MetaCommentary);
    }
    let mut d = good_draft();
    d.amb_query.push_str(" I don't know which ones.");
    check(d, RejectReason::MetaCommentary);
    let mut d = good_draft();
    d.amb_query = format!("{}!", d.clear_query.to_uppercase());
    check(d, RejectReason::NotUnderspecified);
    // Short parentheticals (an acronym, a unit) are fine.
    let mut d = good_draft();
    d.amb_query.push_str(" (in USD)");
    assert_eq!(verify(&d, SQL, &schema), vec![]);

    for leaky in [
        "Show the Song_Name of older singers from the US.", // underscored column
        "Show the song_name of older singers from the US.", // any case
        "Show older singers (singer_in_concert) from the US.", // underscored table
        "Show singer.Name for older singers from the US.",  // dotted
        "Show T1 names for older singers from the US.", // not an alias of this SQL: allowed below
    ] {
        let mut d = good_draft();
        d.amb_query = leaky.to_string();
        d.ambiguities = vec![
            amb("older", "Age > 30", "semantic_ambiguity"),
            amb("singers", "singer", "entity_ambiguity"),
        ];
        let reasons = verify(&d, SQL, &schema);
        if leaky.contains("T1") {
            assert_eq!(reasons, vec![], "T1 is no alias of this SQL");
        } else {
            assert_eq!(reasons, vec![RejectReason::IdentifierLeak], "{leaky}");
        }
    }
    // Aliases with digits leak when the SQL uses them.
    let aliased = "SELECT T1.Name FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.Singer_ID = T2.Singer_ID WHERE T1.Age > 30";
    let leaks = find_leaks("Names from t2 please", aliased, &schema);
    assert_eq!(leaks.len(), 1);
    // A quoted value with an underscore is fine; upper-case SQL words are not.
    let mut d = good_draft();
    d.clear_query = "Singers from United_States, ORDER BY age".to_string();
    assert_eq!(verify(&d, SQL, &schema), vec![RejectReason::SqlLeak]);
    // Mixed-case identifiers leak with their case; plain words do not.
    let stu = r#"SELECT Fname FROM Student WHERE StuID > 3"#;
    let college = schemas()["college_3"].clone();
    assert_eq!(find_leaks("the StuID above 3", stu, &college).len(), 1);
    assert!(find_leaks("the student id above 3", stu, &college).is_empty());
}

/// A scripted reply for the request in `req`: builds a passing draft from the SQL in the
/// prompt (two snippets copied from it, terms copied into the request).
fn reply_for(req: &ChatRequest) -> String {
    let text = request_text(req);
    let sql = text
        .split("The query:\n")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or("")
        .to_string();
    let words: Vec<&str> = sql.split(' ').collect();
    let head = words[..2.min(words.len())].join(" ");
    let tail = words[words.len().saturating_sub(1)..].join(" ");
    serde_json::json!({
        "clear_query": "Give me exactly what I asked for, in full detail.",
        "amb_query": "Give me the usual summary, the standard way.",
        "ambiguities": [
            {"term": "usual summary", "sql_snippet": head, "type": "intent_ambiguity"},
            {"term": "standard way", "sql_snippet": tail, "type": "sort_ambiguity"}
        ]
    })
    .to_string()
}

#[test]
fn generation_writes_records_logs_rejections_retries_and_resumes() {
    let targets = dev_targets(&["concert_singer"], &PerturbConfig::default());
    assert!(targets.len() >= 6, "{}", targets.len());
    let targets = &targets[..6];
    let leaky_id = targets[2].target_id.clone();
    let malformed_first = targets[0].target_id.clone();
    let forever_bad = targets[4].target_id.clone();
    let fixable = targets[5].target_id.clone();
    let model = ScriptedModel::new("scripted", {
        let targets = targets.to_vec();
        let leaky_id = leaky_id.clone();
        let fixable = fixable.clone();
        move |req, _| {
            let text = request_text(req);
            let target = targets
                .iter()
                .find(|t| text.contains(&t.sql))
                .expect("prompt holds its SQL");
            let retry = req.prompt_version.ends_with("request-retry");
            if target.target_id == malformed_first && !retry {
                return Ok("Sure! Here it is: {\"clear_query\": \"x\",}".to_string());
            }
            if target.target_id == forever_bad {
                return Ok("no json".to_string());
            }
            if target.target_id == leaky_id {
                return Ok(
                    reply_for(req).replace("the standard way", "the standard way by Singer_ID")
                );
            }
            if target.target_id == fixable && !req.prompt_version.ends_with("/revise") {
                // Well formed, but only one blurred detail: sent back once, then fixed.
                let mut draft: serde_json::Value = serde_json::from_str(&reply_for(req)).unwrap();
                draft["ambiguities"].as_array_mut().unwrap().pop();
                return Ok(draft.to_string());
            }
            Ok(reply_for(req))
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gen/dev.jsonl");
    let mut seen = Vec::new();
    let report = generate_tasks(
        targets,
        &schemas(),
        model.as_ref(),
        &out,
        &GenConfig::default(),
        &mut |t, o| seen.push((t.target_id.clone(), o.clone())),
    )
    .expect("generation runs");
    assert_eq!(report.written, 4, "{report:?}");
    assert_eq!(report.rejected.get("identifier_leak"), Some(&1));
    assert_eq!(report.rejected.get("malformed"), Some(&1));
    // 6 first calls + 2 retries of malformed replies + 2 revisions (the leaky draft, still
    // leaky afterwards, and the fixable one).
    assert_eq!(report.model_calls, 10);
    assert_eq!(report.retries, 2);
    assert_eq!(report.revisions, 2);
    assert_eq!(seen.len(), 6);
    let revisions: Vec<String> = model
        .seen()
        .iter()
        .filter(|r| r.prompt_version == "merit-interact-gen-v2/revise")
        .map(|r| r.messages.last().unwrap().content.clone())
        .collect();
    assert!(
        revisions.iter().any(|m| m.contains("\"Singer_ID\"")),
        "{revisions:?}"
    );
    assert!(
        revisions
            .iter()
            .any(|m| m.contains("\"ambiguities\" has 1 entries")),
        "{revisions:?}"
    );

    // Every request is greedy, versioned, and the retry carries the parse error.
    let requests = model.seen();
    for req in &requests {
        assert_eq!(req.decoding.temperature, 0.0);
        assert!(req.prompt_version.starts_with("merit-interact-gen-v2/"));
    }
    let retry = requests
        .iter()
        .find(|r| r.prompt_version == "merit-interact-gen-v2/request-retry")
        .expect("a retry was sent");
    let last = &retry.messages.last().unwrap().content;
    assert!(last.contains("not valid JSON"), "{last}");

    let records = read_generated(&out).unwrap();
    assert_eq!(records.len(), 4);
    assert!(records.iter().all(|r| r.target_id() != leaky_id));
    let rejections = read_rejections(&rejection_path(&out)).unwrap();
    assert_eq!(rejections.len(), 2);
    // The leaky draft is kept for inspection; the malformed target has none.
    let leaky = rejections.iter().find(|r| r.target_id == leaky_id).unwrap();
    assert!(leaky
        .draft
        .as_ref()
        .unwrap()
        .amb_query
        .contains("Singer_ID"));
    assert!(rejections.iter().any(|r| r.draft.is_none()));

    // Resume: nothing is asked again.
    let calls_before = model.seen().len();
    let report = generate_tasks(
        targets,
        &schemas(),
        model.as_ref(),
        &out,
        &GenConfig::default(),
        &mut |_, o| assert_eq!(*o, TargetOutcome::AlreadyDone),
    )
    .unwrap();
    assert_eq!(model.seen().len(), calls_before);
    assert_eq!(
        (report.already_done, report.written, report.written_now),
        (6, 4, 0)
    );
    assert_eq!(report.rejected.values().sum::<usize>(), 2);

    // A torn last line (crash mid-write) is cut off and its target redone.
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let torn = &lines[3][..lines[3].len() / 2];
    let mut rebuilt = lines[..3].join("\n");
    rebuilt.push('\n');
    rebuilt.push_str(torn);
    std::fs::write(&out, rebuilt).unwrap();
    let report = generate_quietly(targets, model.as_ref(), &out).unwrap();
    assert_eq!(report.written_now, 1);
    assert_eq!(report.warnings.len(), 1);
    assert_eq!(read_generated(&out).unwrap(), records);
}

#[test]
fn a_model_failure_stops_the_run_without_logging_the_target() {
    let targets = dev_targets(&["concert_singer"], &PerturbConfig::default());
    let model = ScriptedModel::new("down", |_, _| {
        Err(ModelError::Transport("connection refused".to_string()))
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.jsonl");
    let error = generate_quietly(&targets[..2], model.as_ref(), &out).unwrap_err();
    assert!(error.to_string().contains(&targets[0].target_id));
    assert!(read_generated(&out).unwrap().is_empty());
    assert!(read_rejections(&rejection_path(&out)).unwrap().is_empty());
}

#[test]
fn generated_records_round_trip_through_taskset_and_pass_the_judge() {
    let targets = dev_targets(&["concert_singer"], &PerturbConfig::default());
    let model = ScriptedModel::new("scripted", |req, _| Ok(reply_for(req)));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tasks.jsonl");
    let report = generate_quietly(&targets[..3], model.as_ref(), &out).unwrap();
    assert_eq!(report.written, 3);
    let root = dir.path().join("dbs");
    let schema = singer_schema();
    let sqlite = databases().locate("concert_singer").unwrap();
    write_spider_metafiles(&root, &schema, &sqlite, true).expect("metafiles");
    let schema_text =
        std::fs::read_to_string(root.join("concert_singer/concert_singer_schema.txt")).unwrap();
    assert!(
        schema_text.contains("CREATE TABLE singer") && schema_text.contains("First rows of singer")
    );

    let set = TaskSet::load(&out, &root).expect("generated tasks load as a task set");
    let records = read_generated(&out).unwrap();
    assert_eq!(set.tasks().len(), records.len());
    for record in &records {
        let task = set.get(&record.instance_id).expect("task present");
        assert!(task.has_ground_truth());
        assert_eq!(task.public().amb_user_query, record.amb_user_query);
        assert_eq!(
            task.budget_ambiguities(),
            record.user_query_ambiguity.critical_ambiguity.len()
        );
        assert_eq!(task.category(), merit_interact::Category::Query);
        // The public part carries nothing hidden.
        let public = serde_json::to_string(task.public()).unwrap();
        assert!(!public.contains(&record.query) && !public.contains(&record.sol_sql[0]));
    }
    // Submitting the gold SQL in the real environment passes phase 1.
    let first = &records[0];
    let task = set.get(&first.instance_id).unwrap();
    let meta = Arc::clone(set.database("concert_singer").unwrap());
    let backend = merit_interact::sqlite_backend(&meta).expect("database copied beside metafiles");
    let mut env = merit_interact::Environment::new(
        task,
        meta,
        backend,
        merit_interact::ScriptedSimulator::default(),
        EnvConfig::default(),
    )
    .unwrap();
    let result = env.step(ActionCall::submit(&first.sol_sql[0])).unwrap();
    assert!(env.outcome().phase1_passed, "{}", result.observation);

    // Metafiles without the database copy (what a committed task set holds): the file comes
    // from the Spider folder instead.
    let bare = dir.path().join("bare");
    write_spider_metafiles(&bare, &schema, &sqlite, false).expect("metafiles");
    let mut set = TaskSet::load(&out, &bare).unwrap();
    assert!(set
        .database("concert_singer")
        .unwrap()
        .sqlite_file()
        .is_none());
    assert_eq!(set.use_sqlite_dir(&dir.path().join("nowhere")), 0);
    assert_eq!(set.use_sqlite_dir(&spider().join("database")), 1);
    let meta = set.database("concert_singer").unwrap();
    assert_eq!(meta.sqlite_file(), Some(sqlite.as_path()));
    assert!(merit_interact::sqlite_backend(meta).is_ok());
}

struct FixedEmbedder;

impl Embedder for FixedEmbedder {
    fn id(&self) -> String {
        "fixed".to_string()
    }
    fn dimension(&self) -> usize {
        2
    }
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        // "cat" sentences point along x, others along y.
        Ok(texts
            .iter()
            .map(|t| {
                if t.contains("cat") {
                    vec![1.0, 0.0]
                } else {
                    vec![0.0, 1.0]
                }
            })
            .collect())
    }
}

fn hand_task(id: &str, sql: &str, amb: &str) -> GeneratedTask {
    let target = Target {
        target_id: id.to_string(),
        db_id: "concert_singer".to_string(),
        seed_id: "hand".to_string(),
        seed_sql: sql.to_string(),
        sql: sql.to_string(),
        perturbations: Vec::new(),
        write: None,
        follow_up: None,
    };
    let draft = Draft {
        clear_query: amb.to_string(),
        amb_query: amb.to_string(),
        ambiguities: Vec::new(),
    };
    GeneratedTask::new(&target, &draft, "hand")
}

#[test]
fn statistics_on_a_hand_example() {
    let tasks = vec![
        hand_task(
            "a",
            "SELECT T1.Name FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.Singer_ID = T2.Singer_ID",
            "the cat sat on the mat",
        ),
        hand_task("b", "SELECT Name FROM singer WHERE Age > 1000", "the cat lay on the mat"),
        hand_task("c", "SELECT nothing FROM nowhere", "a dog barked"),
    ];
    let stats = compute_stats(
        &tasks,
        &databases(),
        Some(&FixedEmbedder),
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(stats.tasks, 3);
    assert_eq!(stats.executed, 2); // the third names no real table
    assert_eq!(stats.non_empty, 1); // nobody is over 1000
    assert!((stats.execution_rate - 2.0 / 3.0).abs() < 1e-12);
    assert_eq!(stats.structure.parsed, 3);
    assert_eq!(stats.structure.distinct_skeletons, 3);
    assert!((stats.structure.join_share - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!(stats.structure.window_share, 0.0);
    // Pairs: (cat, cat) distance 0, the two (cat, dog) pairs distance 1 → mean 2/3.
    let d = stats.mean_pairwise_cosine_distance.unwrap();
    assert!((d - 2.0 / 3.0).abs() < 1e-9, "{d}");
    // Self-BLEU-3 of the two cat sentences, checked by hand: p1 = 5/6, p2 = 3/5, p3 = 1/4,
    // no brevity penalty, (5/6 · 3/5 · 1/4)^(1/3) = (1/8)^(1/3) = 0.5 each way.
    let two = vec![
        tasks[0].amb_user_query.clone(),
        tasks[1].amb_user_query.clone(),
    ];
    assert!((self_bleu(&two, 3) - 0.5).abs() < 1e-12);
    let vocabulary: BTreeSet<String> = tasks
        .iter()
        .flat_map(|t| tokenize(&t.amb_user_query))
        .collect();
    assert_eq!(stats.vocabulary_amb, vocabulary.len());
    assert_eq!(stats.embedder.as_deref(), Some("fixed"));
    let _ = std::io::stdout().flush();
}

#[test]
fn writes_and_follow_ups_are_generated_and_judged_for_real() {
    use merit_interact::gen::{extend_targets, Extensions};
    // Several databases, so both write kinds and several follow-up operations occur.
    let dbs = [
        "concert_singer",
        "pets_1",
        "car_1",
        "employee_hire_evaluation",
        "world_1",
    ];
    let targets = dev_targets(&dbs, &PerturbConfig::default());
    let queries = targets.len();
    let (targets, report) = extend_targets(
        targets,
        &schemas(),
        &databases(),
        Extensions {
            follow_ups: true,
            writes: true,
        },
        Duration::from_secs(10),
    )
    .unwrap();
    eprintln!("{report:?}");
    let writes: Vec<&Target> = targets.iter().filter(|t| t.write.is_some()).collect();
    assert_eq!(writes.len(), report.writes.kept);
    // One task per statement: targets that filter alike give one write, not two tasks with
    // the same id.
    let ids: BTreeSet<&str> = targets.iter().map(|t| t.target_id.as_str()).collect();
    assert_eq!(ids.len(), targets.len(), "{report:?}");
    assert_eq!(targets.len(), queries + writes.len());
    assert!(
        writes.iter().any(|t| t.sql.starts_with("DELETE")),
        "no delete"
    );
    assert!(
        writes.iter().any(|t| t.sql.starts_with("UPDATE")),
        "no update"
    );
    let operations: BTreeSet<&str> = targets
        .iter()
        .filter_map(|t| t.follow_up.as_ref().map(|f| f.operation.as_str()))
        .collect();
    assert!(operations.len() >= 2, "{operations:?}");
    // Each write is placed right after the query it came from.
    for (i, target) in targets.iter().enumerate().skip(1) {
        if target.write.is_some() {
            assert!(targets[i - 1].write.is_none());
            assert_eq!(targets[i - 1].db_id, target.db_id);
        }
    }

    // Records (with a hand draft: no model needed for the judging check), metafiles, a task
    // set, and the real environment.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("dbs");
    let all = schemas();
    for db in dbs {
        let sqlite = databases().locate(db).unwrap();
        write_spider_metafiles(&root, &all[db], &sqlite, true).expect("metafiles");
    }
    let draft = Draft {
        clear_query: "Do exactly what was asked.".into(),
        amb_query: "Do the usual thing.".into(),
        ambiguities: Vec::new(),
    };
    let chosen: Vec<&Target> = writes
        .iter()
        .copied()
        .take(4)
        .chain(targets.iter().filter(|t| t.follow_up.is_some()).take(3))
        .collect();
    let file = dir.path().join("tasks.jsonl");
    let lines: Vec<String> = chosen
        .iter()
        .map(|t| serde_json::to_string(&GeneratedTask::new(t, &draft, "hand")).unwrap())
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let set = TaskSet::load(&file, &root).expect("generated writes and follow-ups load");
    let episode = |target: &Target, submissions: &[&str]| {
        let mut env = environment(&set, &format!("{}_g{}", target.db_id, target.target_id));
        let mut observations = Vec::new();
        for sql in submissions {
            observations.push(env.step(ActionCall::submit(*sql)).unwrap().observation);
            if env.is_done() {
                break;
            }
        }
        (env.outcome(), observations)
    };
    if crate::common::python_available() {
        for target in chosen.iter().filter(|t| t.write.is_some()) {
            let task = set
                .get(&format!("{}_g{}", target.db_id, target.target_id))
                .unwrap();
            assert_eq!(task.category(), merit_interact::Category::Management);
            // The reference change passes its own test case.
            let (outcome, seen) = episode(target, &[&target.sql]);
            assert!(outcome.phase1_passed, "{}: {seen:?}", target.sql);
            // Changing every row of the table does not.
            let table = target.sql.split_whitespace().nth(2).unwrap();
            let careless = if target.sql.starts_with("DELETE") {
                format!("DELETE FROM {table}")
            } else {
                target.sql.split(" WHERE ").next().unwrap().to_string()
            };
            let (outcome, seen) = episode(target, &[&careless]);
            assert!(!outcome.phase1_passed, "{careless} passed: {seen:?}");
        }
    }
    for target in chosen.iter().filter(|t| t.follow_up.is_some()) {
        let follow_up = target.follow_up.as_ref().unwrap();
        // Phase 1's answer again does not pass phase 2; the follow-up's does.
        let (outcome, seen) = episode(target, &[&target.sql, &target.sql, &follow_up.sql]);
        assert!(seen[0].contains("Phase 2 begins") && seen[0].contains(&follow_up.query));
        assert!(seen[1].contains("not correct"), "{seen:?}");
        assert!(outcome.phase1_passed && outcome.phase2_passed, "{seen:?}");
        assert!((outcome.reward - 1.0).abs() < 1e-9);
    }
}

/// The knowledge stage on generated records of a real database: entries written to
/// `{db}_kb.jsonl`, a deleted entry hidden from the agent's knowledge tools for its task only
/// and counted in that task's budget, a visible one found by name.
#[test]
fn knowledge_entries_reach_the_environment_visible_or_deleted() {
    use merit_interact::gen::{add_knowledge, rewrite_generated, write_knowledge_files};
    // Targets with one `column > number` condition; the scripted writer blurs it with a term
    // of its own, made from the SQL so that each target gets a different name.
    let databases_used = [
        "concert_singer",
        "pets_1",
        "singer",
        "orchestra",
        "dog_kennels",
    ];
    let targets: Vec<Target> = dev_targets(&databases_used, &PerturbConfig::default())
        .into_iter()
        .filter(|t| condition_of(&t.sql).is_some())
        .collect();
    assert!(targets.len() >= 8, "{}", targets.len());
    let model = ScriptedModel::new("scripted", |req, _| {
        let text = request_text(req);
        let sql = text
            .split("The query:\n")
            .nth(1)
            .and_then(|rest| rest.lines().next())
            .unwrap_or("");
        let condition = condition_of(sql).unwrap_or_default();
        let word = [
            "notable", "special", "chosen", "marked", "flagged", "picked",
        ][sql.len() % 6];
        let head = sql.split(' ').take(2).collect::<Vec<_>>().join(" ");
        Ok(serde_json::json!({
            "clear_query": "Give me exactly what I asked for, in full detail.",
            "amb_query": format!("Give me the usual summary for the {word} ones."),
            "ambiguities": [
                {"term": "usual summary", "sql_snippet": head, "type": "intent_ambiguity"},
                {"term": format!("{word} ones"), "sql_snippet": condition, "type": "semantic_ambiguity"}
            ]
        })
        .to_string())
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tasks.jsonl");
    generate_quietly(&targets, model.as_ref(), &out).unwrap();
    let mut records = read_generated(&out).unwrap();
    let report = add_knowledge(&mut records, &schemas());
    assert!(report.new_entries >= 2, "{report:?}");
    rewrite_generated(&out, &records).unwrap();
    let root = dir.path().join("dbs");
    let all = schemas();
    let used: BTreeSet<&str> = records
        .iter()
        .map(|r| r.selected_database.as_str())
        .collect();
    let metafiles = || {
        for db in &used {
            let sqlite = databases().locate(db).unwrap();
            write_spider_metafiles(&root, &all[*db], &sqlite, true).unwrap();
        }
    };
    metafiles();
    write_knowledge_files(&root, &records).unwrap();
    // Metafiles written again (a later database, a rerun) keep the knowledge base.
    metafiles();
    let entries: usize = used
        .iter()
        .map(|db| {
            std::fs::read_to_string(root.join(db).join(format!("{db}_kb.jsonl")))
                .unwrap()
                .lines()
                .count()
        })
        .sum();
    assert_eq!(entries, report.new_entries);
    assert_eq!(read_generated(&out).unwrap(), records);

    let set = TaskSet::load(&out, &root).expect("the set loads");
    let names = |record: &GeneratedTask| -> String {
        environment(&set, &record.instance_id)
            .step(ActionCall::get_all_external_knowledge_names())
            .unwrap()
            .observation
    };
    let with_entry: Vec<&GeneratedTask> = records
        .iter()
        .filter(|r| r.knowledge_entry.is_some())
        .collect();
    // A database with a task that deletes its entry and one that shows its own.
    let (hidden, shown) = with_entry
        .iter()
        .filter(|r| !r.knowledge_ambiguity.is_empty())
        .find_map(|hidden| {
            let shown = with_entry.iter().find(|r| {
                r.knowledge_ambiguity.is_empty() && r.selected_database == hidden.selected_database
            })?;
            Some((hidden, shown))
        })
        .expect("a database with a deleted and a visible entry");
    let hidden_name = &hidden.knowledge_entry.as_ref().unwrap().knowledge;
    let shown_name = &shown.knowledge_entry.as_ref().unwrap().knowledge;
    let seen_by_hidden = names(hidden);
    assert!(
        !seen_by_hidden.contains(hidden_name.as_str()),
        "{seen_by_hidden}"
    );
    assert!(
        seen_by_hidden.contains(shown_name.as_str()),
        "{seen_by_hidden}"
    );
    let seen_by_shown = names(shown);
    assert!(
        seen_by_shown.contains(hidden_name.as_str()),
        "{seen_by_shown}"
    );
    let task = set.get(&hidden.instance_id).unwrap();
    assert_eq!(
        task.budget_ambiguities(),
        hidden.user_query_ambiguity.critical_ambiguity.len() + 1
    );
}

/// A fresh environment for task `instance_id` of `set`, on its database's copied SQLite file,
/// with the scripted simulator.
fn environment(
    set: &TaskSet,
    instance_id: &str,
) -> merit_interact::Environment<merit_interact::SqliteBackend, merit_interact::ScriptedSimulator> {
    let task = set.get(instance_id).expect("task present");
    let meta = Arc::clone(set.database(task.database()).expect("its database"));
    let backend = merit_interact::sqlite_backend(&meta).expect("the database copied beside");
    merit_interact::Environment::new(
        task,
        meta,
        backend,
        merit_interact::ScriptedSimulator::default(),
        EnvConfig::default(),
    )
    .expect("an environment")
}

/// [`generate_tasks`] with the default settings and no progress callback.
fn generate_quietly(
    targets: &[Target],
    model: &dyn merit_core::model::ChatModel,
    out: &Path,
) -> Result<merit_interact::gen::GenReport, merit_interact::gen::GenError> {
    generate_tasks(
        targets,
        &schemas(),
        model,
        out,
        &GenConfig::default(),
        &mut |_, _| {},
    )
}

/// The first `column > number` (or `<`) condition of a WHERE clause, as written.
fn condition_of(sql: &str) -> Option<String> {
    let after = sql.split(" WHERE ").nth(1)?;
    let condition = after
        .split(" AND ")
        .next()?
        .split(" ORDER BY ")
        .next()?
        .split(" GROUP BY ")
        .next()?
        .trim();
    let parts: Vec<&str> = condition.split_whitespace().collect();
    match parts.as_slice() {
        [column, ">" | "<" | ">=" | "<=", number]
            if number.parse::<f64>().is_ok() && !column.contains('(') =>
        {
            Some(condition.to_string())
        }
        _ => None,
    }
}
