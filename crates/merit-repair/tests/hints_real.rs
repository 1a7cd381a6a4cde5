//! Repair hints on real Spider databases, for real failures of the embedded models.

use merit_core::Status;
use merit_data::DatabaseDir;
use merit_repair::grammar::AliasRule;
use merit_repair::hints::{hints_for, DatabaseHints, HintKinds, SchemaCatalog};
use merit_repair::repair::DatabaseAids;
use merit_sql::{Database, SqliteDatabase};
use std::path::PathBuf;

fn database_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/spider/database"
    ))
}

fn open(db_id: &str) -> SqliteDatabase {
    SqliteDatabase::open(database_dir().join(db_id).join(format!("{db_id}.sqlite"))).unwrap()
}

const ALL: HintKinds = HintKinds {
    schema: true,
    values: true,
};

/// The error is taken from the engine itself, never written by hand.
fn engine_error(database: &SqliteDatabase, sql: &str) -> String {
    database
        .query(sql, &merit_sql::ExecLimits::AGENT)
        .unwrap_err()
        .to_string()
}

/// Runs `sql` on `flight_2`: the engine's own error (for a failing query) and the hints for it
/// under `status`.
fn hints_on_flight_2(sql: &str, status: Status) -> (Option<String>, Vec<String>) {
    let database = open("flight_2");
    let catalog = SchemaCatalog::read(&database).unwrap();
    let error = (status == Status::ExecutionError).then(|| engine_error(&database, sql));
    let hints = hints_for(&catalog, &database, ALL, sql, status, error.as_deref());
    (error, hints)
}

#[test]
fn the_catalog_has_tables_columns_and_foreign_keys() {
    let catalog = SchemaCatalog::read(&open("flight_2")).unwrap();
    let names: Vec<&str> = catalog.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["airlines", "airports", "flights"]);
    let flights = &catalog.tables[2];
    assert_eq!(
        flights.columns,
        ["Airline", "FlightNo", "SourceAirport", "DestAirport"]
    );
    assert!(flights.foreign_keys.contains(&(
        "SourceAirport".to_string(),
        "airports".to_string(),
        "AirportCode".to_string()
    )));
}

#[test]
fn a_column_of_another_table_is_named_with_its_table() {
    // dev-243's failure in the demo: the 0.5B model's query, resubmitted eight times.
    let sql = "SELECT Airline FROM airlines WHERE FlightNo < 200";
    let (error, hints) = hints_on_flight_2(sql, Status::ExecutionError);
    assert_eq!(error.as_deref(), Some("no such column: FlightNo"));
    assert_eq!(hints, ["A column named FlightNo exists in table flights."]);
}

#[test]
fn an_invented_column_gets_the_closest_existing_ones_and_a_join_path() {
    let sql = "SELECT T2.AirportName FROM flights AS T1 JOIN airports AS T2 \
               ON T1.SourceAirport = T2.AirportCode WHERE T2.CityName = 'Aberdeen'";
    let (error, hints) = hints_on_flight_2(sql, Status::ExecutionError);
    assert_eq!(error.as_deref(), Some("no such column: T2.CityName"));
    assert_eq!(
        hints[0],
        "No table has a column named CityName; the closest column names are City."
    );
    assert_eq!(
        hints[1],
        "Table airports (named t2 in the query) has the columns City, AirportCode, \
         AirportName, Country, CountryAbbrev."
    );
    assert!(
        hints[2].contains("airports.AirportCode"),
        "a join path between the query's tables: {hints:?}"
    );
}

#[test]
fn a_literal_that_never_occurs_gets_the_values_that_contain_it() {
    // City values in this database carry a trailing space ("Aberdeen "): a real trap.
    let sql = "SELECT count(*) FROM airports WHERE City = 'Aberdeen'";
    let (error, hints) = hints_on_flight_2(sql, Status::DenotationMismatch);
    assert_eq!(error, None);
    assert_eq!(
        hints,
        ["No row of airports.City matches 'Aberdeen'; values containing it: 'Aberdeen '."]
    );
    let sql = "SELECT AirportName FROM airports WHERE City = 'Atlantis'";
    let (_, hints) = hints_on_flight_2(sql, Status::DenotationMismatch);
    assert_eq!(
        hints,
        [
            "The query ran and returned no rows.",
            "No row of airports.City matches 'Atlantis'."
        ]
    );
}

#[test]
fn an_unknown_table_lists_the_closest_and_all_tables() {
    let sql = "SELECT count(*) FROM flight";
    let (_, hints) = hints_on_flight_2(sql, Status::ExecutionError);
    assert_eq!(
        hints,
        [
            "There is no table flight; the closest table names are flights.",
            "The database's tables are airlines, airports, flights."
        ]
    );
}

#[test]
fn the_hint_source_opens_databases_by_id_and_gives_nothing_for_unknown_ones() {
    let source = DatabaseHints::new(DatabaseDir::new(database_dir()));
    let hints = source.hints(
        "flight_2",
        "SELECT Airline FROM airlines WHERE FlightNo < 200",
        Status::ExecutionError,
        Some("no such column: FlightNo"),
        ALL,
    );
    assert_eq!(hints.len(), 1);
    assert!(source
        .hints(
            "no_such_db",
            "SELECT 1",
            Status::ExecutionError,
            Some("x"),
            ALL
        )
        .is_empty());
}

#[test]
fn a_column_of_another_table_of_the_query_is_named_with_its_alias_and_joins_once() {
    let sql = "SELECT T2.FlightNo FROM flights AS T1 JOIN airports AS T2 \
               ON T1.SourceAirport = T2.AirportCode";
    let (error, hints) = hints_on_flight_2(sql, Status::ExecutionError);
    assert_eq!(error.as_deref(), Some("no such column: T2.FlightNo"));
    assert_eq!(
        hints[0],
        "A column named FlightNo exists in table flights (named t1 in the query)."
    );
    let distinct: std::collections::BTreeSet<&String> = hints.iter().collect();
    assert_eq!(distinct.len(), hints.len(), "no hint twice: {hints:?}");
}

/// The hint source over named files (a service's configured databases) answers for the names
/// it was given, under those names, and for nothing else.
#[test]
fn the_hint_source_over_named_files_answers_for_those_names_only() {
    let files = std::collections::HashMap::from([(
        "airline_db".to_string(),
        database_dir().join("flight_2").join("flight_2.sqlite"),
    )]);
    let source = DatabaseHints::for_files(files);
    let hints = source.hints(
        "airline_db",
        "SELECT Airline FROM airlines WHERE FlightNo < 200",
        Status::ExecutionError,
        Some("no such column: FlightNo"),
        ALL,
    );
    assert_eq!(hints.len(), 1, "{hints:?}");
    assert!(source
        .sql_grammar("airline_db", AliasRule::Listed)
        .is_some());
    assert!(source.sql_grammar("flight_2", AliasRule::Free).is_none());
}
