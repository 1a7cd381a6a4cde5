//! The Spider SQL tokenizer, parser and hardness on arbitrary text, against a fixed schema
//! shaped like Spider's `concert_singer`: errors, never panics or hangs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use merit_eval::spider_sql::{
    hardness_of, parse_spider_sql, spider_hardness, spider_tokenize, SpiderSchema,
};
use std::sync::OnceLock;

fn schema() -> &'static SpiderSchema {
    static SCHEMA: OnceLock<SpiderSchema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let table = |name: &str, columns: &[&str]| {
            (
                name.to_string(),
                columns.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
            )
        };
        SpiderSchema::new([
            table(
                "stadium",
                &["stadium_id", "location", "name", "capacity", "average"],
            ),
            table(
                "singer",
                &["singer_id", "name", "country", "age", "is_male"],
            ),
            table(
                "concert",
                &["concert_id", "concert_name", "stadium_id", "year"],
            ),
            table("singer_in_concert", &["concert_id", "singer_id"]),
        ])
    })
}

fuzz_target!(|sql: &str| {
    let _ = spider_tokenize(sql);
    if let Ok(parsed) = parse_spider_sql(schema(), sql) {
        let _ = hardness_of(&parsed);
    }
    let _ = spider_hardness(schema(), sql);
});
