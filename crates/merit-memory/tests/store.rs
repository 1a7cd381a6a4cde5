//! Format-v3 JSONL persistence: byte-identical round trips, torn last lines, corruption.

use merit_core::{Feedback, Question, Status};
use merit_memory::store::{pool_file, serialize_entry, NEGATIVE_FILE, POSITIVE_FILE};
use merit_memory::{
    load_entries, Attempt, Episode, EpisodeSource, FinalizePolicy, HashEmbedder, MemoryError,
    MemoryId, PersistentMemory, Polarity, RetrievalConfig, StreamPos,
};
use std::io::Write;
use std::path::Path;

const GOLD_MARKER: &str = "GOLD_ONLY_c0ffee";

fn question(index: usize) -> Question {
    Question {
        id: format!("dev-{index}"),
        index,
        db_id: ["concert_singer", "pets_1"][index % 2].into(),
        question: format!("question number {index} about singers, \"quoted\" and ünïcode"),
        evidence: String::new(),
        gold_sql: format!("SELECT {GOLD_MARKER} FROM singer WHERE id = {index}"),
        difficulty: None,
    }
}

fn episode(index: usize, solved: bool) -> Episode {
    let source = EpisodeSource::from_question(
        &question(index),
        "CREATE TABLE singer (name text, age int)",
        StreamPos(index as u64),
        "merit",
        format!("step-{index}"),
    );
    let mut episode = Episode::begin(
        source,
        Attempt::new(
            format!("SELECT nme FROM singer -- {index}"),
            Feedback {
                status: Status::ExecutionError,
                error: Some("no such column: nme".into()),
            },
        ),
    );
    let last = if solved {
        Feedback::correct()
    } else {
        Feedback {
            status: Status::DenotationMismatch,
            error: None,
        }
    };
    episode
        .record(Attempt::new("SELECT name FROM singer\tWHERE age > 3", last))
        .unwrap();
    episode
}

fn fill(dir: &Path, range: std::ops::Range<usize>) -> PersistentMemory {
    let embedder = HashEmbedder::new(32);
    let (mut memory, report) = PersistentMemory::open(dir, &embedder).unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    for index in range {
        let finalized = episode(index, index % 3 > 0).finalize(FinalizePolicy::PositiveAndNegative);
        memory.commit(finalized, &embedder).unwrap();
    }
    memory
}

fn read(path: impl AsRef<Path>) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn write_read_write_gives_identical_bytes() {
    let dir = tempfile::tempdir().unwrap();
    drop(fill(dir.path(), 0..12));
    for file in [POSITIVE_FILE, NEGATIVE_FILE] {
        let bytes = read(dir.path().join(file));
        assert!(!bytes.is_empty());
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text
            .lines()
            .all(|l| l.starts_with("{\"format_version\":3,\"id\":")));
        assert!(!text.contains(GOLD_MARKER), "gold SQL leaked into {file}");
    }
    let (entries, report) = load_entries(dir.path()).unwrap();
    assert_eq!((report.positive, report.negative), (8, 4));
    for polarity in Polarity::ALL {
        let rewritten: String = entries
            .iter()
            .filter(|e| e.polarity == polarity)
            .map(|e| serialize_entry(e) + "\n")
            .collect();
        assert_eq!(
            rewritten.as_bytes(),
            read(pool_file(dir.path(), polarity)).as_slice()
        );
    }
    // Reopening and continuing appends after the existing lines; old bytes are untouched.
    let before = read(dir.path().join(POSITIVE_FILE));
    let memory = fill(dir.path(), 12..15);
    assert_eq!(memory.memory().len(), 15);
    let after = read(dir.path().join(POSITIVE_FILE));
    assert_eq!(&after[..before.len()], before.as_slice());
    let (entries, _) = load_entries(dir.path()).unwrap();
    let ids: Vec<u64> = entries.iter().map(|e| e.id.0).collect();
    assert_eq!(ids, (0..15).collect::<Vec<_>>());
}

#[test]
fn a_reloaded_memory_retrieves_exactly_like_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = HashEmbedder::new(32);
    let original = fill(dir.path(), 0..20);
    let (reloaded, _) = PersistentMemory::open(dir.path(), &embedder).unwrap();
    let query = episode(30, false).retrieval_query().unwrap();
    let explain = |memory: &PersistentMemory| {
        memory
            .memory()
            .view_at(StreamPos(25), "dev-30")
            .explain(&query, &RetrievalConfig::merit(), &embedder)
            .unwrap()
    };
    let before = explain(&original);
    assert!(!before.pools[0].candidates.is_empty());
    assert_eq!(before, explain(&reloaded));
}

#[test]
fn a_torn_last_line_is_dropped_with_a_warning_and_cut_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    drop(fill(dir.path(), 0..6));
    let path = dir.path().join(POSITIVE_FILE);
    let good = read(&path);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(b"{\"format_version\":3,\"id\":99,\"pola")
        .unwrap();
    drop(file);
    let (entries, report) = load_entries(dir.path()).unwrap();
    assert_eq!(entries.len(), 6);
    assert_eq!(report.warnings.len(), 1);
    assert!(
        report.warnings[0].contains("torn last line"),
        "{:?}",
        report.warnings
    );
    assert!(report.warnings[0].contains(POSITIVE_FILE));
    // Reopening for append removes the torn bytes; the next entry starts on its own line.
    let memory = fill_allowing_warnings(dir.path(), 6..8);
    assert_eq!(memory.memory().len(), 8);
    let after = read(&path);
    assert_eq!(&after[..good.len()], good.as_slice());
    let (entries, report) = load_entries(dir.path()).unwrap();
    assert!(report.warnings.is_empty());
    assert_eq!(entries.len(), 8);
}

fn fill_allowing_warnings(dir: &Path, range: std::ops::Range<usize>) -> PersistentMemory {
    let embedder = HashEmbedder::new(32);
    let (mut memory, report) = PersistentMemory::open(dir, &embedder).unwrap();
    assert_eq!(report.warnings.len(), 1);
    for index in range {
        let finalized = episode(index, true).finalize(FinalizePolicy::PositiveAndNegative);
        memory.commit(finalized, &embedder).unwrap();
    }
    memory
}

#[test]
fn a_complete_last_entry_without_newline_is_kept_and_terminated() {
    let dir = tempfile::tempdir().unwrap();
    drop(fill(dir.path(), 0..4));
    let path = dir.path().join(POSITIVE_FILE);
    let mut bytes = read(&path);
    assert_eq!(bytes.pop(), Some(b'\n'));
    std::fs::write(&path, &bytes).unwrap();
    let (entries, report) = load_entries(dir.path()).unwrap();
    assert_eq!(entries.len(), 4);
    assert!(report.warnings.is_empty());
    drop(fill(dir.path(), 4..6));
    let (entries, _) = load_entries(dir.path()).unwrap();
    assert_eq!(entries.len(), 6);
}

fn corrupt_error(dir: &Path) -> (String, usize, String) {
    match load_entries(dir) {
        Err(MemoryError::Corrupt {
            path,
            line,
            message,
        }) => (path, line, message),
        other => panic!("expected a corruption error, got {other:?}"),
    }
}

#[test]
fn corruption_is_an_error_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    drop(fill(dir.path(), 0..9));
    let path = dir.path().join(POSITIVE_FILE);
    let original = String::from_utf8(read(&path)).unwrap();
    let lines: Vec<&str> = original.lines().collect();

    // A broken line in the middle.
    let mut broken = lines.clone();
    broken[2] = "{not json";
    std::fs::write(&path, broken.join("\n") + "\n").unwrap();
    let (file, line, message) = corrupt_error(dir.path());
    assert!(file.ends_with(POSITIVE_FILE));
    assert_eq!(line, 3);
    assert!(message.contains("not a memory entry"), "{message}");
    let shown = load_entries(dir.path()).unwrap_err().to_string();
    assert!(shown.contains("positive.jsonl line 3"), "{shown}");

    // A broken last line that does end in a newline is corruption, not a torn write.
    let mut broken = lines.clone();
    let last = broken.len() - 1;
    broken[last] = "{\"format_version\":3";
    std::fs::write(&path, broken.join("\n") + "\n").unwrap();
    assert_eq!(corrupt_error(dir.path()).1, lines.len());

    // Another format version.
    let mut broken = lines.clone();
    let v4 = lines[0].replacen("\"format_version\":3", "\"format_version\":4", 1);
    broken[0] = &v4;
    std::fs::write(&path, broken.join("\n") + "\n").unwrap();
    let (_, line, message) = corrupt_error(dir.path());
    assert_eq!(line, 1);
    assert!(message.contains("format version 4"), "{message}");

    // An unknown field.
    let mut broken = lines.clone();
    let extra = lines[1].replacen("\"id\":", "\"gold_sql\":\"x\",\"id\":", 1);
    broken[1] = &extra;
    std::fs::write(&path, broken.join("\n") + "\n").unwrap();
    assert_eq!(corrupt_error(dir.path()).1, 2);

    // An empty line.
    let mut broken = lines.clone();
    broken.insert(1, "");
    std::fs::write(&path, broken.join("\n") + "\n").unwrap();
    let (_, line, message) = corrupt_error(dir.path());
    assert_eq!((line, message.as_str()), (2, "empty line"));

    // A negative entry in the positive file.
    let negative = String::from_utf8(read(dir.path().join(NEGATIVE_FILE))).unwrap();
    let mut broken = lines.clone();
    broken.push(negative.lines().next().unwrap());
    std::fs::write(&path, broken.join("\n") + "\n").unwrap();
    let (_, _, message) = corrupt_error(dir.path());
    assert!(
        message.contains("negative entry in the positive file"),
        "{message}"
    );

    // Lines out of order.
    let mut broken = lines.clone();
    broken.swap(0, 1);
    std::fs::write(&path, broken.join("\n") + "\n").unwrap();
    let (_, line, message) = corrupt_error(dir.path());
    assert_eq!(line, 2);
    assert!(message.contains("does not follow"), "{message}");

    // The same id in both files.
    std::fs::write(&path, original.clone()).unwrap();
    let first_negative = negative.lines().next().unwrap().to_string();
    let id_of_first_positive = lines[0].split(",\"polarity\"").next().unwrap().to_string();
    let clash = first_negative.replacen(
        first_negative.split(",\"polarity\"").next().unwrap(),
        &id_of_first_positive,
        1,
    );
    std::fs::write(dir.path().join(NEGATIVE_FILE), clash + "\n").unwrap();
    let (_, _, message) = corrupt_error(dir.path());
    assert!(message.contains("used twice"), "{message}");

    // Opening for writes refuses a corrupt directory too.
    let embedder = HashEmbedder::new(32);
    assert!(PersistentMemory::open(dir.path(), &embedder).is_err());
}

#[test]
fn missing_folder_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    assert!(matches!(
        load_entries(&missing),
        Err(MemoryError::Io { .. })
    ));
    // An existing folder without pool files is an empty memory.
    let (entries, report) = load_entries(dir.path()).unwrap();
    assert!(entries.is_empty());
    assert_eq!((report.positive, report.negative), (0, 0));
    // Opening creates the folder and both files.
    let embedder = HashEmbedder::new(8);
    let (memory, _) = PersistentMemory::open(&missing, &embedder).unwrap();
    assert!(memory.memory().is_empty());
    assert!(missing.join(POSITIVE_FILE).is_file() && missing.join(NEGATIVE_FILE).is_file());
    assert_eq!(MemoryId::parse("m12"), Some(MemoryId(12)));
}

#[test]
fn reloading_with_another_embedder_re_embeds_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    drop(fill(dir.path(), 0..3));
    // The stored texts re-embed with any dimension; the memory adopts the embedder's.
    let (memory, _) = PersistentMemory::open(dir.path(), &HashEmbedder::new(8)).unwrap();
    assert_eq!(memory.memory().dimension(), 8);
    assert_eq!(memory.memory().len(), 3);
}

/// all-MiniLM-L6-v2 reads 256 word pieces: a long schema placed early cut off every failure
/// field of the dense document, so the schema comes last.
#[test]
fn the_dense_document_puts_every_failure_field_before_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    drop(fill(dir.path(), 0..2));
    let (entries, _) = load_entries(dir.path()).unwrap();
    for entry in &entries {
        let text = merit_memory::text::entry_dense_text(entry);
        let schema_at = text
            .find("\nschema: CREATE TABLE")
            .expect("the schema is there");
        for field in [
            "question:",
            "\nstatus:",
            "\nfailing sql:",
            "\nchange:",
            "\nerror type:",
            "\noutcome:",
            "\nerror:",
        ] {
            let at = text
                .find(field)
                .unwrap_or_else(|| panic!("{field} missing in {text}"));
            assert!(at < schema_at, "{field} comes after the schema in {text}");
        }
    }
}

/// A retired entry is kept and listed but never retrieved; restoring it brings it back, and an
/// unknown id is an error naming it.
#[test]
fn retired_entries_are_listed_but_never_retrieved_until_restored() {
    let embedder = HashEmbedder::new(32);
    let mut memory = merit_memory::Memory::for_embedder(&embedder);
    for index in 0..3 {
        memory
            .commit(
                episode(index, true).finalize(FinalizePolicy::PositiveAndNegative),
                &embedder,
            )
            .unwrap();
    }
    let query = episode(9, false).retrieval_query().unwrap();
    let config = RetrievalConfig::merit();
    let retrieved = |memory: &merit_memory::Memory| -> Vec<MemoryId> {
        memory
            .view_at(StreamPos(10), "dev-9")
            .retrieve(&query, &config, &embedder)
            .unwrap()
            .precedents
            .iter()
            .map(|p| p.entry.id)
            .collect()
    };
    let before = retrieved(&memory);
    assert!(before.contains(&MemoryId(1)), "{before:?}");
    assert!(!memory.set_retired(MemoryId(1), true).unwrap());
    assert!(memory.is_retired(MemoryId(1)));
    assert!(!retrieved(&memory).contains(&MemoryId(1)));
    let view = memory.view_at(StreamPos(10), "dev-9");
    assert!(view.get(MemoryId(1)).is_some() && view.len() == 3);
    assert!(memory.set_retired(MemoryId(1), false).unwrap());
    assert_eq!(retrieved(&memory), before);
    let error = memory.set_retired(MemoryId(7), true).unwrap_err();
    assert!(
        matches!(error, MemoryError::UnknownEntry(MemoryId(7))),
        "{error}"
    );
    assert!(error.to_string().contains("m7"), "{error}");
}

/// An attempt handed over with the caller's label keeps it: the entry's failure type and rule
/// are the caller's, not a second classification of the same text.
#[test]
fn a_label_handed_over_with_an_attempt_is_the_one_the_entry_keeps() {
    use merit_core::failure::{Classification, FailureType};
    let embedder = HashEmbedder::new(32);
    let mut memory = merit_memory::Memory::for_embedder(&embedder);
    let source = EpisodeSource::from_question(
        &question(0),
        "CREATE TABLE singer (name text)",
        StreamPos(0),
        "merit",
        "t",
    );
    let failing = Feedback {
        status: Status::ExecutionError,
        error: Some("no such column: nme".into()),
    };
    let label = Classification {
        failure_type: FailureType::Unknown,
        rule: "caller-rule",
    };
    let mut episode = Episode::begin(
        source,
        Attempt::classified("SELECT nme FROM singer", failing, Some(label)),
    );
    episode
        .record(Attempt::new("SELECT name FROM singer", Feedback::correct()))
        .unwrap();
    let id = memory
        .commit(
            episode.finalize(FinalizePolicy::PositiveAndNegative),
            &embedder,
        )
        .unwrap()
        .unwrap();
    let entry = memory.view_all().get(id).unwrap();
    assert_eq!(entry.failure_type, FailureType::Unknown);
    assert_eq!(entry.failure_rule, "caller-rule");
    // Without a label, the attempt is classified where it is made.
    let plain = Attempt::new(
        "SELECT nme FROM singer",
        Feedback {
            status: Status::ExecutionError,
            error: Some("no such column: nme".into()),
        },
    );
    assert_eq!(
        plain.failure().map(|c| c.failure_type),
        Some(FailureType::SchemaLinking)
    );
    // A correct attempt never carries a label.
    assert!(
        Attempt::classified("SELECT 1", Feedback::correct(), Some(label))
            .failure()
            .is_none()
    );
}
