//! A Litestream 0.5 replica on S3-compatible storage (v0.5.18's `s3.ReplicaClient`), through
//! `object_store`'s S3 client driven by a private current-thread tokio runtime.
//!
//! Layout: the object `<prefix>/<level as %04x>/<minTXID>-<maxTXID>.ltx` in the bucket
//! (`0000` for level 0, `0009` for snapshots; unlike the directory layout there is no
//! `ltx/`). Each object carries the metadata `x-amz-meta-litestream-timestamp`: the
//! header's timestamp in RFC 3339 with nanoseconds as Go prints it, which `litestream restore
//! -timestamp` reads (and `LastModified` where it is missing). A PUT is atomic: readers see
//! the whole object or none.
//!
//! The URL is `s3://BUCKET/PREFIX?QUERY`, read as Litestream's `NewReplicaClientFromURL`
//! reads it: `endpoint` (a scheme is added as Litestream adds it: `http://` for local
//! hosts, else `https://`; a custom endpoint means path-style requests unless
//! `force-path-style=false`), `region`, `force-path-style` / `forcePathStyle`,
//! `skip-verify` / `skipVerify`; a host `BUCKET.HOST:PORT` means the endpoint
//! `http://HOST:PORT`; a host `BUCKET.s3.REGION.amazonaws.com` names the bucket and region.
//! Also ours: `timeout` (seconds per request, default 30). Then the environment:
//! `AWS_ACCESS_KEY_ID` / `LITESTREAM_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` /
//! `LITESTREAM_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION` / `AWS_DEFAULT_REGION`,
//! `AWS_ENDPOINT_URL` / `LITESTREAM_S3_ENDPOINT` (the URL's own values win). Without a
//! region the client uses `us-east-1`, as Litestream does for custom endpoints. An empty
//! prefix is refused: Litestream would write keys starting with `/`.
//!
//! `AWS_CA_BUNDLE`, when set, names a PEM file of certificate authorities trusted beside
//! the system's (as the AWS SDKs read it; `object_store` itself ignores the variable); a file
//! that cannot be read is an error naming it.
//!
//! Failures are bounded: a connection gets 3 s, a request `timeout`, and a failed request
//! is retried at most twice within 6 s, so an unreachable server is an error within about
//! 10 s; the caller retries on its own schedule.

use super::api::{check_level, file_name, parse_file_name, sort_files, FileInfo, ReplicaClient};
use crate::error::Error;
use crate::format::LtxFile;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{
    Attribute, AttributeValue, Attributes, BackoffConfig, Certificate, ClientOptions, GetOptions,
    ObjectStore, PutOptions, PutPayload, RetryConfig,
};
use std::future::Future;
use std::time::Duration;

/// The metadata key Litestream stores a file's header timestamp under.
pub const METADATA_KEY_TIMESTAMP: &str = "litestream-timestamp";
/// Litestream's region when none is given with a custom endpoint.
pub const DEFAULT_REGION: &str = "us-east-1";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const RETRY_BUDGET: Duration = Duration::from_secs(6);
const MAX_RETRIES: usize = 2;
/// HEAD requests in flight at once when reading timestamps (Litestream uses 50).
const METADATA_CONCURRENCY: usize = 16;

/// Where an S3 replica is and how to reach it, as parsed from its URL and the environment.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Options {
    pub bucket: String,
    /// Key prefix without leading or trailing `/`; never empty.
    pub prefix: String,
    pub region: String,
    /// `scheme://host[:port]`, or `None` for AWS itself.
    pub endpoint: Option<String>,
    pub force_path_style: bool,
    pub skip_verify: bool,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub request_timeout: Duration,
}

impl std::fmt::Debug for S3Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Options")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("force_path_style", &self.force_path_style)
            .field("skip_verify", &self.skip_verify)
            .field("access_key_id", &self.access_key_id.as_ref().map(|_| "(set)"))
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Litestream's `BoolQueryValue`: the first of `keys` present; `Some(Err)` for a bad value.
fn query_bool(query: &[(String, String)], keys: &[&str]) -> Option<Result<bool, Error>> {
    let (key, raw) = keys
        .iter()
        .find_map(|k| query.iter().find(|(q, v)| q == k && !v.is_empty()))?;
    Some(match raw.to_ascii_lowercase().as_str() {
        "true" | "1" | "t" | "yes" => Ok(true),
        "false" | "0" | "f" | "no" => Ok(false),
        _ => Err(Error::Config(format!("{key}={raw} is not a boolean"))),
    })
}

/// Litestream's `IsLocalEndpoint` (plain HTTP is assumed for these).
fn is_local_host(host: &str) -> bool {
    host == "localhost"
        || host == "127.0.0.1"
        || [
            "192.168.", "10.", "172.16.", "172.17.", "172.18.", "172.19.", "172.2", "172.30.", "172.31.",
        ]
        .iter()
        .any(|p| host.starts_with(p))
        || host.ends_with(".local")
        || host.ends_with(".localhost")
}

/// Litestream's `EnsureEndpointScheme`.
fn with_scheme(endpoint: &str) -> String {
    if endpoint.starts_with("http://") || endpoint.starts_with("https://") {
        return endpoint.trim_end_matches('/').to_string();
    }
    let host = endpoint.split(['/', ':']).next().unwrap_or("");
    let scheme = if is_local_host(host) { "http" } else { "https" };
    format!("{scheme}://{}", endpoint.trim_end_matches('/'))
}

/// Litestream's `CleanReplicaURLPath`: `path.Clean`, no leading `/`.
fn clean_prefix(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

impl S3Options {
    /// Parses `s3://BUCKET/PREFIX?QUERY` and reads the environment (see the module's doc).
    pub fn from_url(raw: &str) -> Result<S3Options, Error> {
        let u = url::Url::parse(raw).map_err(|e| Error::Config(format!("{e}: cannot parse the S3 URL")))?;
        if u.scheme() != "s3" {
            return Err(Error::Config(format!("not an s3:// URL: scheme {}", u.scheme())));
        }
        let query: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let get = |k: &str| {
            query
                .iter()
                .find(|(q, v)| q == k && !v.is_empty())
                .map(|(_, v)| v.clone())
        };
        let host = u.host_str().unwrap_or("").to_string();
        let host_port = match u.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.clone(),
        };
        let (mut bucket, mut region, mut endpoint, mut path_style) = (host.clone(), None, None, false);
        if host_port.contains(':') && !host_port.contains(".com") {
            // Litestream's MinIO form, BUCKET.HOST:PORT.
            match host_port.split_once('.') {
                Some((b, rest)) => {
                    bucket = b.to_string();
                    endpoint = Some(format!("http://{rest}"));
                    region = Some(DEFAULT_REGION.to_string());
                }
                None => {
                    bucket = String::new();
                    endpoint = Some(format!("http://{host_port}"));
                }
            }
            path_style = true;
        } else if let Some(stem) = host.strip_suffix(".amazonaws.com") {
            if let Some((b, rest)) = stem.rsplit_once(".s3") {
                bucket = b.to_string();
                region = rest.strip_prefix('.').map(str::to_string);
            }
        }
        if let Some(e) = get("endpoint") {
            endpoint = Some(with_scheme(&e));
            if query_bool(&query, &["forcePathStyle", "force-path-style"]).is_none_or(|v| v.unwrap_or(true)) {
                path_style = true;
            }
        }
        if let Some(r) = get("region") {
            region = Some(r);
        }
        let path_style_set = query_bool(&query, &["forcePathStyle", "force-path-style"]);
        if let Some(v) = &path_style_set {
            path_style = *v.as_ref().map_err(|e| Error::Config(e.to_string()))?;
        }
        let skip_verify = match query_bool(&query, &["skipVerify", "skip-verify"]) {
            Some(v) => v?,
            None => false,
        };
        if bucket.is_empty() {
            return Err(Error::Config(format!(
                "no bucket in {}",
                display_without_secrets(&u)
            )));
        }
        if endpoint.is_none() {
            if let Some(e) = env("AWS_ENDPOINT_URL").or_else(|| env("LITESTREAM_S3_ENDPOINT")) {
                endpoint = Some(with_scheme(&e));
                if path_style_set.is_none() {
                    path_style = true;
                }
            }
        }
        let region = region
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| DEFAULT_REGION.to_string());
        let request_timeout = match get("timeout") {
            Some(t) => match t.parse::<f64>() {
                Ok(s) if s > 0.0 && s.is_finite() => Duration::from_secs_f64(s),
                _ => {
                    return Err(Error::Config(format!(
                        "timeout={t} is not a positive number of seconds"
                    )))
                }
            },
            None => DEFAULT_REQUEST_TIMEOUT,
        };
        let prefix = clean_prefix(u.path());
        if prefix.is_empty() {
            return Err(Error::Config(format!(
                "{} has no path: give the replica a key prefix, s3://{bucket}/PREFIX",
                display_without_secrets(&u)
            )));
        }
        ObjectPath::parse(&prefix).map_err(|e| Error::Config(format!("prefix {prefix:?}: {e}")))?;
        Ok(S3Options {
            bucket,
            prefix,
            region,
            endpoint,
            force_path_style: path_style,
            skip_verify,
            access_key_id: env("AWS_ACCESS_KEY_ID").or_else(|| env("LITESTREAM_ACCESS_KEY_ID")),
            secret_access_key: env("AWS_SECRET_ACCESS_KEY").or_else(|| env("LITESTREAM_SECRET_ACCESS_KEY")),
            session_token: env("AWS_SESSION_TOKEN"),
            request_timeout,
        })
    }

    /// The URL for messages: bucket, prefix, endpoint; never credentials.
    pub fn display_url(&self) -> String {
        match &self.endpoint {
            Some(e) => format!("s3://{}/{}?endpoint={e}", self.bucket, self.prefix),
            None => format!("s3://{}/{}", self.bucket, self.prefix),
        }
    }
}

fn display_without_secrets(u: &url::Url) -> String {
    format!("s3://{}{}", u.host_str().unwrap_or(""), u.path())
}

/// Go's `time.Time.Format(time.RFC3339Nano)` of a UTC time in milliseconds: trailing zeros
/// of the fraction dropped, `Z`.
pub fn rfc3339_nano(ms: i64) -> String {
    let t = chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default();
    let s = t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let (head, _) = s.split_at(s.len() - 1);
    let head = head.trim_end_matches('0').trim_end_matches('.');
    format!("{head}Z")
}

/// Milliseconds of an RFC 3339 time (any fraction; sub-millisecond digits dropped).
pub fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// A replica in an S3 bucket.
pub struct S3Client {
    options: S3Options,
    store: AmazonS3,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for S3Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Client")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn storage(context: impl Into<String>) -> impl FnOnce(object_store::Error) -> Error {
    let context = context.into();
    move |e| Error::Storage {
        context,
        message: e.to_string(),
    }
}

impl S3Client {
    /// A client for `s3://BUCKET/PREFIX?QUERY` (nothing is sent until the first call).
    pub fn open(url: &str) -> Result<S3Client, Error> {
        S3Client::with_options(S3Options::from_url(url)?)
    }

    pub fn with_options(options: S3Options) -> Result<S3Client, Error> {
        let mut client = ClientOptions::new()
            .with_allow_http(true)
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(options.request_timeout)
            .with_allow_invalid_certificates(options.skip_verify);
        if let Some(bundle) = env("AWS_CA_BUNDLE") {
            let pem =
                std::fs::read(&bundle).map_err(|e| Error::Config(format!("AWS_CA_BUNDLE={bundle}: {e}")))?;
            let certs = Certificate::from_pem_bundle(&pem)
                .map_err(|e| Error::Config(format!("AWS_CA_BUNDLE={bundle}: {e}")))?;
            for cert in certs {
                client = client.with_root_certificate(cert);
            }
        }
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                base: 2.0,
            },
            max_retries: MAX_RETRIES,
            retry_timeout: RETRY_BUDGET,
        };
        // Not `from_env`: the variables are read once, above, as Litestream reads them.
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&options.bucket)
            .with_region(&options.region)
            .with_client_options(client)
            .with_retry(retry)
            .with_virtual_hosted_style_request(!options.force_path_style);
        if let Some(endpoint) = &options.endpoint {
            let endpoint = if options.force_path_style {
                endpoint.clone()
            } else {
                // object_store expects a virtual-hosted endpoint to name the bucket already.
                match endpoint.split_once("://") {
                    Some((scheme, host)) => format!("{scheme}://{}.{host}", options.bucket),
                    None => endpoint.clone(),
                }
            };
            builder = builder.with_endpoint(endpoint);
        }
        match (&options.access_key_id, &options.secret_access_key) {
            (Some(id), Some(secret)) => {
                builder = builder.with_access_key_id(id).with_secret_access_key(secret);
                if let Some(token) = &options.session_token {
                    builder = builder.with_token(token);
                }
            }
            _ => {
                // The instance, container or web-identity credentials object_store finds.
                for key in [
                    "AWS_WEB_IDENTITY_TOKEN_FILE",
                    "AWS_ROLE_ARN",
                    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                ] {
                    if let (Some(v), Ok(k)) =
                        (env(key), key.to_ascii_lowercase().parse::<AmazonS3ConfigKey>())
                    {
                        builder = builder.with_config(k, v);
                    }
                }
            }
        }
        let store = builder
            .build()
            .map_err(|e| Error::Config(format!("{}: {e}", options.display_url())))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Io {
                context: "start the S3 client's runtime".into(),
                source: e,
            })?;
        Ok(S3Client {
            options,
            store,
            runtime,
        })
    }

    pub fn options(&self) -> &S3Options {
        &self.options
    }

    /// Runs a request to completion. From inside another tokio runtime (where `block_on`
    /// would panic) it runs on a scoped thread of its own.
    fn run<T: Send, F: Future<Output = T> + Send>(&self, fut: F) -> T {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.runtime.block_on(fut);
        }
        std::thread::scope(|s| {
            s.spawn(|| self.runtime.block_on(fut))
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    fn level_prefix(&self, level: u32) -> ObjectPath {
        ObjectPath::from_iter(
            self.options
                .prefix
                .split('/')
                .chain([format!("{level:04x}").as_str()]),
        )
    }

    /// The object key of a file: `<prefix>/<level %04x>/<min>-<max>.ltx`.
    pub fn key(&self, level: u32, min_txid: u64, max_txid: u64) -> String {
        format!(
            "{}/{level:04x}/{}",
            self.options.prefix,
            file_name(min_txid, max_txid)
        )
    }

    fn path(&self, level: u32, min_txid: u64, max_txid: u64) -> ObjectPath {
        self.level_prefix(level).child(file_name(min_txid, max_txid))
    }

    fn describe(&self, level: u32, min_txid: u64, max_txid: u64) -> String {
        format!(
            "s3://{}/{}",
            self.options.bucket,
            self.key(level, min_txid, max_txid)
        )
    }
}

impl ReplicaClient for S3Client {
    fn url(&self) -> String {
        self.options.display_url()
    }

    fn list(&self, level: u32) -> Result<Vec<FileInfo>, Error> {
        check_level(level)?;
        let prefix = self.level_prefix(level);
        let metas: Vec<object_store::ObjectMeta> = self
            .run(self.store.list(Some(&prefix)).try_collect())
            .map_err(storage(format!("list s3://{}/{prefix}/", self.options.bucket)))?;
        let mut out: Vec<FileInfo> = metas
            .into_iter()
            .filter_map(|m| {
                let (min_txid, max_txid) = m.location.filename().and_then(parse_file_name)?;
                Some(FileInfo {
                    level,
                    min_txid,
                    max_txid,
                    size: m.size,
                    timestamp_ms: m.last_modified.timestamp_millis(),
                })
            })
            .collect();
        sort_files(&mut out);
        Ok(out)
    }

    fn list_with_header_timestamps(&self, level: u32) -> Result<Vec<FileInfo>, Error> {
        let files = self.list(level)?;
        let heads = files.into_iter().map(|mut f| {
            let path = self.path(f.level, f.min_txid, f.max_txid);
            async move {
                let opts = GetOptions {
                    head: true,
                    ..GetOptions::default()
                };
                match self.store.get_opts(&path, opts).await {
                    Ok(got) => {
                        let stamp = got
                            .attributes
                            .get(&Attribute::Metadata(METADATA_KEY_TIMESTAMP.into()))
                            .and_then(|v| parse_rfc3339_ms(v.as_ref()));
                        if let Some(ms) = stamp {
                            f.timestamp_ms = ms;
                        }
                        Ok(Some(f))
                    }
                    // Deleted since the listing (retention running beside us).
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    Err(e) => Err(storage(format!(
                        "head {}",
                        self.describe(f.level, f.min_txid, f.max_txid)
                    ))(e)),
                }
            }
        });
        let found: Vec<Option<FileInfo>> = self.run(
            futures::stream::iter(heads)
                .buffered(METADATA_CONCURRENCY)
                .try_collect(),
        )?;
        Ok(found.into_iter().flatten().collect())
    }

    fn read(&self, file: &FileInfo) -> Result<Vec<u8>, Error> {
        let path = self.path(file.level, file.min_txid, file.max_txid);
        let context = format!("read {}", self.describe(file.level, file.min_txid, file.max_txid));
        let bytes = self
            .run(async {
                let got = self.store.get(&path).await?;
                got.bytes().await
            })
            .map_err(storage(context))?;
        Ok(bytes.to_vec())
    }

    fn write(&self, level: u32, file: &LtxFile) -> Result<FileInfo, Error> {
        check_level(level)?;
        let h = &file.header;
        let path = self.path(level, h.min_txid, h.max_txid);
        let bytes = file.encode_bytes();
        let size = bytes.len() as u64;
        let mut attributes = Attributes::new();
        attributes.insert(
            Attribute::Metadata(METADATA_KEY_TIMESTAMP.into()),
            AttributeValue::from(rfc3339_nano(h.timestamp)),
        );
        let opts = PutOptions {
            attributes,
            ..PutOptions::default()
        };
        self.run(self.store.put_opts(&path, PutPayload::from(bytes), opts))
            .map_err(storage(format!(
                "write {}",
                self.describe(level, h.min_txid, h.max_txid)
            )))?;
        Ok(FileInfo {
            level,
            min_txid: h.min_txid,
            max_txid: h.max_txid,
            size,
            timestamp_ms: h.timestamp,
        })
    }

    fn delete(&self, files: &[FileInfo]) -> Result<(), Error> {
        if files.is_empty() {
            return Ok(());
        }
        let paths: Vec<ObjectPath> = files
            .iter()
            .map(|f| self.path(f.level, f.min_txid, f.max_txid))
            .collect();
        let results: Vec<Result<ObjectPath, object_store::Error>> = self.run(
            self.store
                .delete_stream(futures::stream::iter(paths.into_iter().map(Ok)).boxed())
                .collect(),
        );
        for r in results {
            match r {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    return Err(storage(format!(
                        "delete {} files under s3://{}/{}",
                        files.len(),
                        self.options.bucket,
                        self.options.prefix
                    ))(e))
                }
            }
        }
        Ok(())
    }
}
