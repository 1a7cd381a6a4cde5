//! `merit ask`: one question, answered by the embedded chat model with the initial
//! Text-to-SQL prompt; optionally run on the database.

use crate::models::{load_chat_model, reexec_with_bounded_openmp_spin};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use merit_core::model::{ChatModel, Decoding};
use merit_core::Benchmark;
use merit_data::DatabaseDir;
use merit_models::llama::DEFAULT_CONTEXT_SIZE;
use merit_repair::extract::extract_sql;
use merit_repair::prompts::initial::{initial_request, schema_from_database, InitialTask};
use merit_sql::{Database, ExecLimits, ResultSet, SqliteDatabase};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `merit ask`.
#[derive(Debug, Args)]
pub struct AskArgs {
    /// Folder with one folder per database (Spider's `database/`, BIRD's `dev_databases/`).
    #[arg(long, required_unless_present = "pg_url")]
    db_dir: Option<PathBuf>,
    /// Database id (its folder name; with `--pg-url`, the PostgreSQL database's name).
    #[arg(long)]
    db: String,
    /// A PostgreSQL server (`postgresql://user:password@host:port/admin-db`): ask about its
    /// database `--db` instead of a SQLite file (read-only transactions, statement timeout,
    /// row cap; the role must not be a superuser).
    #[arg(long, conflicts_with = "db_dir")]
    pg_url: Option<String>,
    /// The question, in natural language.
    question: String,
    /// BIRD-style evidence (external knowledge) to show with the question.
    #[arg(long)]
    evidence: Option<String>,
    /// Chat model to use (see `merit models list`).
    #[arg(long, default_value = merit_models::registry::DEFAULT_CHAT_MODEL)]
    model: String,
    /// A GGUF file to use instead of the cached or downloaded model.
    #[arg(long)]
    model_path: Option<PathBuf>,
    /// Context window of the model, in tokens.
    #[arg(long, default_value_t = DEFAULT_CONTEXT_SIZE)]
    context_size: u32,
    /// Most tokens the model may write.
    #[arg(long, default_value_t = 512)]
    max_tokens: u32,
    /// Run the query (read-only, 30 s limit) and print its rows.
    #[arg(long)]
    execute: bool,
    /// Rows printed with `--execute`.
    #[arg(long, default_value_t = 20)]
    max_rows: usize,
    /// Also print the prompt and the model's raw reply (on stderr).
    #[arg(long)]
    verbose: bool,
}

/// Runs `merit ask`.
pub fn run(args: AskArgs) -> Result<()> {
    reexec_with_bounded_openmp_spin();
    let database: Box<dyn Database> = match (&args.pg_url, &args.db_dir) {
        (Some(url), _) => {
            let server = merit_interact::PostgresServer::new(url)?;
            Box::new(merit_interact::PostgresDatabase::connect(
                &server, &args.db,
            )?)
        }
        (None, Some(db_dir)) => {
            let path = DatabaseDir::new(db_dir)
                .locate(&args.db)
                .map_err(|missing| anyhow!("{missing}"))?;
            Box::new(SqliteDatabase::open(&path)?)
        }
        (None, None) => bail!("give --db-dir (SQLite) or --pg-url (PostgreSQL)"),
    };
    let schema = schema_from_database(database.as_ref())
        .with_context(|| format!("cannot read the schema of {}", database.describe()))?;
    if schema.is_empty() {
        bail!("{} has no tables", database.describe());
    }
    let task = InitialTask {
        benchmark: if args.evidence.is_some() {
            Benchmark::Bird
        } else {
            Benchmark::Spider
        },
        dialect: database.dialect(),
        schema: &schema,
        question: &args.question,
        evidence: args.evidence.as_deref(),
    };
    let decoding = Decoding {
        max_tokens: args.max_tokens,
        ..Decoding::default()
    };
    let request = initial_request(&task, decoding);

    let chat = load_chat_model(&args.model, args.model_path.as_deref(), args.context_size)?;
    if args.verbose {
        eprintln!("--- prompt ({}) ---", request.prompt_version);
        eprintln!("{}", request.messages[0].content);
    }
    let started = Instant::now();
    let reply = chat.chat(&request)?;
    eprintln!(
        "{}: {} prompt tokens, {} generated, {:.1} s",
        chat.id(),
        reply.prompt_tokens,
        reply.completion_tokens,
        started.elapsed().as_secs_f64()
    );
    if args.verbose {
        eprintln!("--- reply ---\n{}\n---", reply.text);
    }
    let sql = extract_sql(&reply.text)
        .map_err(|error| anyhow!("{error}\n--- full reply ---\n{}", reply.text))?;
    println!("{sql}");

    if args.execute {
        let result = database.query(&sql, &ExecLimits::AGENT)?;
        print!("{}", render_table(&result, args.max_rows));
    }
    Ok(())
}

/// Rows as a small aligned text table, at most `max_rows` of them, with a count line.
fn render_table(result: &ResultSet, max_rows: usize) -> String {
    const MAX_CELL: usize = 40;
    let cell = |text: String| -> String {
        let flat = text.replace(['\n', '\r', '\t'], " ");
        if flat.chars().count() > MAX_CELL {
            let mut short: String = flat.chars().take(MAX_CELL - 1).collect();
            short.push('…');
            short
        } else {
            flat
        }
    };
    let header: Vec<String> = result.columns.iter().cloned().map(cell).collect();
    let rows: Vec<Vec<String>> = result
        .rows
        .iter()
        .take(max_rows)
        .map(|row| row.iter().map(|value| cell(value.display())).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, value) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(value.chars().count());
            }
        }
    }
    let line = |values: &[String]| -> String {
        let padded: Vec<String> = values
            .iter()
            .zip(&widths)
            .map(|(value, &width)| {
                let pad = width.saturating_sub(value.chars().count());
                format!("{value}{}", " ".repeat(pad))
            })
            .collect();
        format!("{}\n", padded.join(" | ").trim_end())
    };
    let mut out = String::new();
    out.push_str(&line(&header));
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    out.push_str(&format!("{}\n", rule.join("-+-")));
    for row in &rows {
        out.push_str(&line(row));
    }
    let total = result.rows.len();
    let more = if result.truncated { "+" } else { "" };
    let noun = if total == 1 && !result.truncated {
        "row"
    } else {
        "rows"
    };
    if total > rows.len() {
        out.push_str(&format!(
            "({total}{more} {noun}, first {} shown)\n",
            rows.len()
        ));
    } else {
        out.push_str(&format!("({total}{more} {noun})\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use merit_sql::Value;

    #[test]
    fn the_table_aligns_columns_and_counts_rows() {
        let result = ResultSet {
            columns: vec!["count(*)".to_string(), "name".to_string()],
            rows: vec![
                vec![Value::Integer(6), Value::Text(b"Joe Sharp".to_vec())],
                vec![Value::Null, Value::Text(b"a\nb".to_vec())],
            ],
            truncated: false,
        };
        assert_eq!(
            render_table(&result, 20),
            "count(*) | name\n---------+----------\n6        | Joe Sharp\nNULL     | a b\n(2 rows)\n"
        );
        assert_eq!(
            render_table(&result, 1),
            "count(*) | name\n---------+----------\n6        | Joe Sharp\n(2 rows, first 1 shown)\n"
        );
    }
}
