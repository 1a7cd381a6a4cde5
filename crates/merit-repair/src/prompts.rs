//! The prompt that opens every question: the initial Text-to-SQL generation (the repair
//! prompts live beside the loop that fills them, in `repair/prompt.rs`).

pub mod initial;
