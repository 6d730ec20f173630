//! `onesync-package`: builds the distributable packages (see README.md).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

mod go;
mod node;
mod python;
mod rust;
mod workspace;

#[derive(Parser)]
#[command(about = "Build onesync's packages from this workspace")]
struct Cli {
    #[command(subcommand)]
    kind: Kind,
}

#[derive(Subcommand)]
enum Kind {
    /// The Python wheel (onesync-VERSION-py3-none-manylinux_*.whl).
    Python(Out),
    /// The npm tarball (onesync-VERSION.tgz).
    Node(Out),
    /// The Go module directory (with the static library it links).
    Go(Out),
    /// The publishable Rust crates (.crate files).
    Rust(Out),
    /// Every package.
    All(Out),
}

#[derive(clap::Args)]
struct Out {
    /// Directory the packages are written to.
    #[arg(long, default_value = "target/packages")]
    out: PathBuf,
}

fn main() -> Result<()> {
    let ws = workspace::Workspace::find()?;
    match Cli::parse().kind {
        Kind::Python(o) => print(python::build(&ws, &o.out)?),
        Kind::Node(o) => print(node::build(&ws, &o.out)?),
        Kind::Go(o) => print(go::build(&ws, &o.out)?),
        Kind::Rust(o) => {
            for p in rust::build(&ws, &o.out)? {
                print(p);
            }
        }
        Kind::All(o) => {
            print(python::build(&ws, &o.out)?);
            print(node::build(&ws, &o.out)?);
            print(go::build(&ws, &o.out)?);
            for p in rust::build(&ws, &o.out)? {
                print(p);
            }
        }
    }
    Ok(())
}

fn print(path: PathBuf) {
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!("{}\t{size}", path.display());
}
