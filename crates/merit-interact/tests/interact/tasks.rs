//! Loading the real task files, metafiles and ground truth.

use crate::common::{custom_tasks, load_mini, mini_root};
use merit_interact::budget::total_budget;
use merit_interact::{Category, DatabaseMeta, LoadError, TaskSet};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

#[test]
fn every_mini_interact_task_loads_with_its_metafiles() {
    let set = load_mini();
    assert_eq!(set.tasks().len(), 300);
    // 26 databases are used by tasks (sports_events is in the release but unused).
    assert_eq!(set.databases().len(), 26);
    assert!(set.database("sports_events").is_none());
    for task in set.tasks() {
        assert_eq!(task.category(), Category::Query, "{}", task.instance_id());
        assert!(
            !task.has_ground_truth(),
            "the public release withholds gold SQL"
        );
        assert!(!task.has_follow_up());
        assert!(!task.public().amb_user_query.is_empty());
        assert!(task.high_level().is_some());
    }
    assert_eq!(
        set.tasks()
            .iter()
            .filter(|t| t.high_level() == Some(true))
            .count(),
        160
    );
    // Three databases have no file in the mirror: 39 tasks cannot execute SQL.
    let missing: BTreeSet<&str> = set
        .databases()
        .values()
        .filter(|m| m.sqlite_file().is_none())
        .map(|m| m.name())
        .collect();
    assert_eq!(
        missing,
        BTreeSet::from(["cybermarket", "exchange_traded_funds", "hulushows"])
    );
    let unavailable = set
        .tasks()
        .iter()
        .filter(|t| missing.contains(t.database()))
        .count();
    assert_eq!(unavailable, 39);
}

#[test]
fn every_metafile_folder_loads_including_unused_databases() {
    let root = mini_root();
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .expect("data folder")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 27);
    let (mut strings, mut objects, mut kb) = (0, 0, 0);
    for name in &names {
        let meta = DatabaseMeta::load(&root.join(name), name).expect("metafiles load");
        assert!(meta.schema().contains("CREATE TABLE"), "{name}");
        for (key, value) in meta.column_meanings() {
            assert_eq!(key, &key.to_lowercase());
            // cross_db's file prefixes every key with `cross` (a data quirk).
            let prefix = if name == "cross_db" {
                "cross|"
            } else {
                &format!("{name}|")
            };
            assert!(key.starts_with(prefix), "{key}");
            if value.is_string() {
                strings += 1;
            } else {
                objects += 1;
            }
        }
        kb += meta.knowledge().len();
    }
    assert_eq!((strings, objects), (2770, 90));
    assert_eq!(kb, 1621);
    // Lookups work for cross_db despite its prefix.
    let cross = DatabaseMeta::load(&root.join("cross_db"), "cross_db").unwrap();
    let (key, _) = cross.column_meanings().iter().next().unwrap();
    let parts: Vec<&str> = key.split('|').collect();
    assert!(cross
        .column_meaning(&parts[1].to_uppercase(), parts[2])
        .is_some());
}

#[test]
fn budgets_at_patience_6_span_14_to_28_with_mode_18() {
    let set = load_mini();
    let mut histogram: BTreeMap<i64, usize> = BTreeMap::new();
    for task in set.tasks() {
        *histogram
            .entry(total_budget(task.budget_ambiguities(), 6).0 / 10)
            .or_default() += 1;
    }
    assert_eq!(*histogram.keys().next().unwrap(), 14);
    assert_eq!(*histogram.keys().last().unwrap(), 28);
    let mode = histogram.iter().max_by_key(|(_, n)| **n).unwrap().0;
    assert_eq!(*mode, 18);
}

#[test]
fn knowledge_filter_hides_deleted_entries_and_keeps_duplicates() {
    let set = load_mini();
    let alien = set.database("alien").unwrap();
    // alien_1 deletes KB id 0, "Signal-to-Noise Quality Indicator (SNQI)".
    let view = alien.knowledge_view(&BTreeSet::from([0]));
    assert!(!view
        .names()
        .contains(&"Signal-to-Noise Quality Indicator (SNQI)"));
    assert!(view
        .lookup("Signal-to-Noise Quality Indicator (SNQI)")
        .is_empty());
    assert_eq!(view.all().len(), alien.knowledge().len() - 1);
    // Exact, case-sensitive lookup.
    let full = alien.knowledge_view(&BTreeSet::new());
    assert_eq!(
        full.lookup("Signal-to-Noise Quality Indicator (SNQI)")
            .len(),
        1
    );
    assert!(full
        .lookup("signal-to-noise quality indicator (snqi)")
        .is_empty());

    // fake has two entries named "High-Activity Account" (ids 74 and 77): both are kept.
    let fake = set.database("fake").unwrap();
    let view = fake.knowledge_view(&BTreeSet::new());
    let ids: Vec<i64> = view
        .lookup("High-Activity Account")
        .iter()
        .map(|k| k.id)
        .collect();
    assert_eq!(ids, vec![74, 77]);
    assert_eq!(
        view.names()
            .iter()
            .filter(|n| **n == "High-Activity Account")
            .count(),
        1
    );
    // Deleting one of the pair leaves the other visible.
    let view = fake.knowledge_view(&BTreeSet::from([77]));
    assert_eq!(view.lookup("High-Activity Account").len(), 1);
}

#[test]
fn every_deleted_knowledge_id_exists_in_its_knowledge_base() {
    // 297 deletions across the release, all resolvable (README). Checked through the public
    // API: a task's filtered view is exactly one entry per deleted id shorter.
    let root = mini_root();
    let text = std::fs::read_to_string(root.join("mini_interact.jsonl")).unwrap();
    let set = load_mini();
    let mut total = 0;
    for line in text.lines() {
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        let deleted: BTreeSet<i64> = record["knowledge_ambiguity"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|k| k["deleted_knowledge"].as_i64())
            .collect();
        total += record["knowledge_ambiguity"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| k["deleted_knowledge"].is_i64())
            .count();
        let meta = set
            .database(record["selected_database"].as_str().unwrap())
            .unwrap();
        let all = meta.knowledge_view(&BTreeSet::new()).all().len();
        assert_eq!(
            meta.knowledge_view(&deleted).all().len(),
            all - deleted.len()
        );
    }
    assert_eq!(total, 297);
}

#[test]
fn ground_truth_merges_by_instance_id() {
    let mut set = load_mini();
    let dir = tempfile::tempdir().unwrap();
    let gt = dir.path().join("gt.jsonl");
    let lines = [
        json!({"instance_id": "alien_1", "sol_sql": ["SELECT 1"], "test_cases": [],
               "conditions": {"decimal": 2, "distinct": false, "order": true}}),
        json!({"instance_id": "alien_2", "sol_sql": "SELECT 2", "category": "Query"}),
        json!({"instance_id": "nope_9", "sol_sql": ["SELECT 3"]}),
    ];
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(&gt, text.join("\n") + "\n\n").unwrap();
    let report = set.merge_ground_truth(&gt).unwrap();
    assert_eq!(report.merged, 2);
    assert_eq!(report.unknown_ids, vec!["nope_9".to_string()]);
    assert_eq!(report.without_ground_truth, 298);
    assert!(set.get("alien_1").unwrap().has_ground_truth());
    assert!(set.get("alien_2").unwrap().has_ground_truth());
    assert!(!set.get("alien_3").unwrap().has_ground_truth());
}

#[test]
fn a_bad_ground_truth_file_names_the_field_and_changes_nothing() {
    let mut set = load_mini();
    let dir = tempfile::tempdir().unwrap();
    let gt = dir.path().join("gt.jsonl");
    std::fs::write(
        &gt,
        format!(
            "{}\n{}\n",
            json!({"instance_id": "alien_1", "sol_sql": ["SELECT 'SECRET_GOLD_1'"]}),
            json!({"instance_id": "alien_2", "sol_sql": {"oops": "SECRET_GOLD_2"}})
        ),
    )
    .unwrap();
    let error = set.merge_ground_truth(&gt).unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, LoadError::Field { line: 2, .. }),
        "{message}"
    );
    assert!(message.contains("sol_sql"), "{message}");
    assert!(!message.contains("SECRET"), "{message}");
    assert!(!set.get("alien_1").unwrap().has_ground_truth());

    // Invalid JSON: the position only, not serde's text (which can quote the input).
    std::fs::write(
        &gt,
        "{\"instance_id\": \"alien_1\", \"sol_sql\": [\"SECRET_GOLD\" oops]}\n",
    )
    .unwrap();
    let message = set.merge_ground_truth(&gt).unwrap_err().to_string();
    assert!(message.contains(":1: invalid JSON"), "{message}");
    assert!(!message.contains("SECRET"), "{message}");
}

#[test]
fn lite_and_full_records_with_follow_ups_load() {
    let (_dir, set) = custom_tasks(&[
        json!({
            "instance_id": "alien_M_1", "selected_database": "alien",
            "amb_user_query": "Fix the temperatures.", "query": "Set all temperatures to 0.",
            "sol_sql": "UPDATE observatories SET airtempc = 0", "test_cases": ["def test_case(a, b, c, d):\n    pass"],
            "preprocess_sql": [], "clean_up_sqls": [], "external_knowledge": [],
            "user_query_ambiguity": {"critical_ambiguity": [], "non_critical_ambiguity": []},
            "knowledge_ambiguity": [],
            "follow_up": {"query": "How many are there now?", "sol_sql": ["SELECT COUNT(*) FROM observatories"],
                          "test_cases": [], "category": "Query", "conditions": {"order": false}}
        }),
        json!({"instance_id": "alien_901", "selected_database": "alien",
               "amb_user_query": "q", "category": "Query", "follow_up": null}),
    ]);
    let management = set.get("alien_M_1").unwrap();
    assert_eq!(management.category(), Category::Management);
    assert!(management.has_ground_truth());
    assert!(management.has_follow_up());
    assert_eq!(management.budget_ambiguities(), 0);
    assert!(!set.get("alien_901").unwrap().has_follow_up());
}

#[test]
fn malformed_task_files_fail_with_the_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    let cases: [(&str, &str); 4] = [
        (
            r#"{"selected_database": "alien", "amb_user_query": "q"}"#,
            "instance_id",
        ),
        (
            r#"{"instance_id": "a_1", "selected_database": "../etc", "amb_user_query": "q"}"#,
            "selected_database",
        ),
        (
            r#"{"instance_id": "a_1", "selected_database": "alien", "amb_user_query": "q", "category": "Other"}"#,
            "category",
        ),
        (
            r#"{"instance_id": "a_1", "selected_database": "alien", "amb_user_query": "q", "knowledge_ambiguity": [{"term": 3}]}"#,
            "knowledge_ambiguity[0].term",
        ),
    ];
    for (line, field) in cases {
        std::fs::write(&file, format!("\n{line}\n")).unwrap();
        let message = TaskSet::load(&file, &mini_root()).unwrap_err().to_string();
        assert!(message.contains(":2:"), "{message}");
        assert!(message.contains(field), "{field}: {message}");
    }
    // A database without metafiles.
    std::fs::write(
        &file,
        r#"{"instance_id": "x_1", "selected_database": "nowhere", "amb_user_query": "q"}"#,
    )
    .unwrap();
    let error = TaskSet::load(&file, &mini_root()).unwrap_err();
    assert!(
        matches!(error, LoadError::MissingMetafile { .. }),
        "{error}"
    );
    // Duplicate ids.
    let record =
        r#"{"instance_id": "alien_1", "selected_database": "alien", "amb_user_query": "q"}"#;
    std::fs::write(&file, format!("{record}\n{record}\n")).unwrap();
    let error = TaskSet::load(&file, &mini_root()).unwrap_err();
    assert!(
        matches!(error, LoadError::DuplicateTask { line: 2, .. }),
        "{error}"
    );
}
