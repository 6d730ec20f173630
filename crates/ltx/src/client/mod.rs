//! Replica backends behind one trait, [`ReplicaClient`]: a local directory
//! ([`file::FileClient`]) and S3-compatible storage ([`s3::S3Client`]), each laid out as
//! Litestream 0.5 lays out that backend, so stock `litestream restore` reads either.

mod api;
pub mod file;
pub mod s3;

pub use api::{check_level, file_name, parse_file_name, FileInfo, ReplicaClient, SNAPSHOT_LEVEL};

use crate::error::Error;

/// The client for a replica URL: `file:///ABS/DIR` (or a plain absolute path) or
/// `s3://BUCKET/PREFIX?QUERY` ([`s3`] lists the query parameters and variables).
pub fn open(url: &str) -> Result<Box<dyn ReplicaClient>, Error> {
    if let Some(rest) = url.strip_prefix("file://") {
        // Litestream takes the path after the scheme, query dropped.
        let path = rest.split('?').next().unwrap_or("");
        if !path.starts_with('/') {
            return Err(Error::Config(format!(
                "{url}: a file replica needs an absolute path, file:///DIR"
            )));
        }
        return Ok(Box::new(file::FileClient::new(path)));
    }
    if url.starts_with('/') {
        return Ok(Box::new(file::FileClient::new(url)));
    }
    if url.starts_with("s3://") {
        return Ok(Box::new(s3::S3Client::open(url)?));
    }
    let scheme = url.split_once("://").map_or("(none)", |(s, _)| s);
    Err(Error::Config(format!(
        "unsupported replica URL scheme {scheme}: file:///DIR or s3://BUCKET/PREFIX"
    )))
}
