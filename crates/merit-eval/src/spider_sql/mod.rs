//! Spider's `process_sql` parser and `eval_hardness`, reimplemented (work in progress).
