//! merit-sql
