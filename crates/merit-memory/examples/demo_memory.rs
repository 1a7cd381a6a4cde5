//! Writes a small memory directory from hand-made repair episodes on Spider's
//! `concert_singer`, with error texts produced by really running each failing query, so that
//! `merit memory ls/show/explain` have something to look at.
//!
//! ```text
//! cargo run -p merit-memory --example demo_memory -- /tmp/merit-memory-demo
//! merit memory ls /tmp/merit-memory-demo
//! ```

use merit_core::{Feedback, Status};
use merit_memory::{
    Attempt, Episode, EpisodeSource, FinalizePolicy, HashEmbedder, PersistentMemory, StreamPos,
};
use merit_sql::{Database, ExecLimits, SqliteDatabase};

const DATABASE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/data/spider/database/concert_singer/concert_singer.sqlite"
);

/// (question, attempts, whether the last attempt is correct)
type Script = (&'static str, &'static [&'static str], bool);

const EPISODES: &[Script] = &[
    (
        "How many singers do we have?",
        &["SELECT count(*) FROM singers", "SELECT count(*) FROM singer"],
        true,
    ),
    (
        "Show the name and country of all singers ordered by age.",
        &[
            "SELECT nme, country FROM singer ORDER BY age",
            "SELECT name, country FROM singer ORDER BY age DESC",
        ],
        true,
    ),
    (
        "What is the average, minimum and maximum age of French singers?",
        &[
            "SELECT avg(age), min(age), max(age) FROM singer WHERE country = 'france'",
            "SELECT avg(age), min(age), max(age) FROM singer WHERE country = 'France'",
        ],
        true,
    ),
    (
        "Show stadium names with more than one concert.",
        &[
            "SELECT T2.name FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.stadium_id WHERE count(*) > 1",
            "SELECT T2.name FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.stadium_id GROUP BY T2.name HAVING count(*) >= 1",
            "SELECT T2.name FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.stadium_id GROUP BY T1.stadium_id HAVING count(*) > 1",
        ],
        true,
    ),
    (
        "List the names of singers who performed in a concert in 2014.",
        &[
            "SELECT name FROM singer WHERE year = 2014",
            "SELECT T2.name FROM singer_in_concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id WHERE year = 2014",
        ],
        false,
    ),
    (
        "What is the name of the stadium with the highest capacity?",
        &[
            "SELEC name FROM stadium ORDER BY capacity DESC LIMIT 1",
            "SELECT name FROM stadium ORDER BY capacity DESC LIMIT 1",
        ],
        true,
    ),
    (
        "How many concerts took place in each stadium?",
        &[
            "SELECT stadium_id, count(*) FROM concerts GROUP BY stadium_id",
            "SELECT stadium_id, count(*) FROM concert GROUP BY stadium_id",
        ],
        true,
    ),
];

fn judge(database: &SqliteDatabase, sql: &str, correct: bool) -> Feedback {
    if correct {
        return Feedback::correct();
    }
    match database.query(sql, &ExecLimits::AGENT) {
        Ok(_) => Feedback {
            status: Status::DenotationMismatch,
            error: None,
        },
        Err(error) => Feedback {
            status: Status::ExecutionError,
            error: Some(error.to_string()),
        },
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: demo_memory DIR");
        std::process::exit(2);
    };
    let database = SqliteDatabase::open(DATABASE)?;
    let embedder = HashEmbedder::new(384);
    let (mut memory, _) = PersistentMemory::open(&dir, &embedder)?;
    let start = memory.memory().last_finalized().map_or(0, |p| p.0 + 1);
    for (offset, (question, attempts, solved)) in EPISODES.iter().enumerate() {
        let position = start + offset as u64;
        let source = EpisodeSource {
            query_id: format!("demo-{position}"),
            db_id: "concert_singer".into(),
            question: (*question).into(),
            evidence: String::new(),
            schema: "stadium(stadium_id, location, name, capacity, highest, lowest, average); \
                     singer(singer_id, name, country, song_name, song_release_year, age, is_male); \
                     concert(concert_id, concert_name, theme, stadium_id, year); \
                     singer_in_concert(concert_id, singer_id)"
                .into(),
            stream_pos: StreamPos(position),
            method: "demo".into(),
            time: position.to_string(),
        };
        let last = attempts.len() - 1;
        let feedback = |i: usize| judge(&database, attempts[i], *solved && i == last);
        let mut episode = Episode::begin(source, Attempt::new(attempts[0], feedback(0)));
        for (i, sql) in attempts.iter().enumerate().skip(1) {
            episode.record(Attempt::new(*sql, feedback(i)))?;
        }
        let id = memory.commit(
            episode.finalize(FinalizePolicy::PositiveAndNegative),
            &embedder,
        )?;
        if let Some(id) = id {
            println!("{id}: {question}");
        }
    }
    println!("{} entries in {dir}", memory.memory().len());
    Ok(())
}
