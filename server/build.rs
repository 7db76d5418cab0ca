//! Embeds every file under `web/dist/` (the management page) in the binary, and
//! generates Envoy's rate limit and quota services from the vendored protos in `vendor/proto/`.

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("web/dist");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut found = Vec::new();
    files(&root, &mut found);
    let mut code = String::from("/// The page's files: (path under dist/, bytes).\npub(crate) static FILES: &[(&str, &[u8])] = &[\n");
    for path in &found {
        println!("cargo:rerun-if-changed={}", path.display());
        let name = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        writeln!(
            code,
            "    ({name:?}, include_bytes!({:?})),",
            path.display().to_string()
        )
        .unwrap();
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("assets.rs");
    std::fs::write(out, code).unwrap();
    #[cfg(feature = "grpc")]
    envoy_protos();
}

/// Envoy's rate limit and quota services, generated from the vendored protos; a quota
/// bucket id's entries in name order.
#[cfg(feature = "grpc")]
fn envoy_protos() {
    println!("cargo:rerun-if-changed=vendor/proto");
    use_bundled_protoc();
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .btree_map(".envoy.service.rate_limit_quota")
        .codec_path("crate::grpc::codec::SmallCodec")
        .compile_protos(
            &[
                "vendor/proto/envoy/service/ratelimit/v3/rls.proto",
                "vendor/proto/envoy/service/rate_limit_quota/v3/rlqs.proto",
                "vendor/proto/kuadrant/kuadrantrls.proto",
            ],
            &["vendor/proto"],
        )
        .unwrap();
}

#[cfg(feature = "grpc")]
/// Points prost-build at the protoc (and its `google/protobuf` includes) shipped in
/// `protoc-bin-vendored`.
fn use_bundled_protoc() {
    let protoc = protoc_bin_vendored::protoc_bin_path().unwrap();
    let include = protoc_bin_vendored::include_path().unwrap();
    // A build script runs on one thread: setting its environment races with nothing.
    std::env::set_var("PROTOC", protoc);
    std::env::set_var("PROTOC_INCLUDE", include);
}
