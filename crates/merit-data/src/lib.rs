//! merit-data
