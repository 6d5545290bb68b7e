//! Turns bindgen's declarations of colibri.h (src/sys/colibri_h.rs, committed and checked to be
//! current by regen-sys.sh --check) into what a dlopen-ing crate needs:
//!
//! - `types.rs`: everything but the `extern "C"` blocks (constants, #[repr(C)] structs, callback
//!   types, and bindgen's layout tests, which compare each struct with clang's view of the header);
//! - `functions.rs`: `Functions`, a table with one `unsafe extern "C" fn` pointer per declared
//!   function (field = name without `colibri_`), resolved through dlsym, so the signatures are
//!   bindgen's and cannot drift from the header;
//! - `layout.rs`: offset and size of every field of every struct, compared by a unit test with
//!   capi/abi/layout.txt (the ABI baseline the C checks hold the header to).
//!
//! No dependencies: plain string processing of bindgen's regular output.
use std::env;
use std::fs;
use std::path::Path;

fn main() {
    let source = "src/sys/colibri_h.rs";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-changed=build.rs");
    let text = fs::read_to_string(source).expect("read src/sys/colibri_h.rs");
    let out = env::var("OUT_DIR").unwrap();

    // Split off the extern blocks: `extern "C" {` ... the next `}` (declarations hold no braces).
    let mut types = String::new();
    let mut functions = Vec::new(); // (name, params, return type)
    let mut rest = text.as_str();
    while let Some(start) = rest.find("extern \"C\" {") {
        types.push_str(&rest[..start]);
        let body_start = start + "extern \"C\" {".len();
        let end = body_start + rest[body_start..].find('}').expect("unterminated extern block");
        for decl in rest[body_start..end].split(';') {
            let decl = squash(decl);
            if decl.is_empty() {
                continue;
            }
            functions.push(parse_fn(&decl));
        }
        rest = &rest[end + 1..];
    }
    types.push_str(rest);
    assert!(!functions.is_empty(), "no functions in {source}");
    fs::write(Path::new(&out).join("types.rs"), types).unwrap();

    let mut table = String::from(
        "/// Every function of colibri.h, resolved from the loaded library.\n\
         #[derive(Clone, Copy)]\n#[allow(dead_code)]\npub struct Functions {\n",
    );
    for (name, params, ret) in &functions {
        let field = name.strip_prefix("colibri_").unwrap_or(name);
        table.push_str(&format!("    pub {field}: unsafe extern \"C\" fn({params}){ret},\n"));
    }
    table.push_str("}\n\n/// The exported names, in header order.\npub const FUNCTION_NAMES: &[&str] = &[\n");
    for (name, _, _) in &functions {
        table.push_str(&format!("    \"{name}\",\n"));
    }
    table.push_str(
        "];\n\nimpl Functions {\n    \
         /// Resolves every function with `lookup` (a NUL-terminated name -> address, or null).\n    \
         /// Errors with the first missing name.\n    \
         /// # Safety\n    \
         /// `lookup` must return addresses of functions with exactly the header's signatures.\n    \
         pub unsafe fn resolve(lookup: &mut dyn FnMut(&[u8]) -> *mut ::std::os::raw::c_void) -> Result<Functions, &'static str> {\n        \
         Ok(Functions {\n",
    );
    for (name, params, ret) in &functions {
        let field = name.strip_prefix("colibri_").unwrap_or(name);
        table.push_str(&format!(
            "            {field}: {{\n                let p = lookup(b\"{name}\\0\");\n                \
             if p.is_null() {{ return Err(\"{name}\"); }}\n                \
             unsafe {{ ::core::mem::transmute::<*mut ::std::os::raw::c_void, unsafe extern \"C\" fn({params}){ret}>(p) }}\n            }},\n"
        ));
    }
    table.push_str("        })\n    }\n}\n");
    fs::write(Path::new(&out).join("functions.rs"), table).unwrap();

    // Field layout of every struct with public fields.
    let flat = squash(&text);
    let mut layout = String::from(
        "/// (struct, field, offset, size); field \"sizeof\" gives the struct's size.\n\
         #[allow(dead_code)]\npub fn layout() -> Vec<(&'static str, &'static str, usize, usize)> {\n    \
         fn size_of_pointee<T>(_: *const T) -> usize { ::core::mem::size_of::<T>() }\n    \
         let mut v = Vec::new();\n",
    );
    let mut rest = flat.as_str();
    while let Some(start) = rest.find("pub struct ") {
        let after = &rest[start + "pub struct ".len()..];
        let name_end = after.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap();
        let name = &after[..name_end];
        let open = after.find('{').unwrap();
        let close = after.find('}').unwrap();
        let body = &after[open + 1..close];
        let fields: Vec<&str> = body
            .split(',')
            .filter_map(|f| f.trim().strip_prefix("pub "))
            .filter_map(|f| f.split(':').next())
            .map(str::trim)
            .collect();
        if !fields.is_empty() {
            layout.push_str(&format!(
                "    {{\n        let u = ::core::mem::MaybeUninit::<{name}>::uninit();\n        let p = u.as_ptr();\n"
            ));
            for f in fields {
                layout.push_str(&format!(
                    "        unsafe {{ let q = ::core::ptr::addr_of!((*p).{f}); v.push((\"{name}\", \"{f}\", q as usize - p as usize, size_of_pointee(q))); }}\n"
                ));
            }
            layout.push_str(&format!(
                "        v.push((\"{name}\", \"sizeof\", ::core::mem::size_of::<{name}>(), 0));\n    }}\n"
            ));
        }
        rest = &after[close + 1..];
    }
    layout.push_str("    v\n}\n");
    fs::write(Path::new(&out).join("layout.rs"), layout).unwrap();
}

/// Collapses runs of whitespace into one space and trims.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `pub fn NAME(PARAMS) -> RET` -> (NAME, PARAMS, " -> RET" or "").
fn parse_fn(decl: &str) -> (String, String, String) {
    let decl = decl.strip_prefix("pub fn ").unwrap_or_else(|| panic!("unexpected declaration: {decl}"));
    let open = decl.find('(').unwrap();
    let name = decl[..open].trim().to_string();
    // The parameter list ends at the parenthesis matching the first one.
    let mut depth = 0;
    let mut close = open;
    for (i, c) in decl.char_indices().skip(open) {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    close = i;
                    break;
                }
            }
            _ => {}
        }
    }
    let params = decl[open + 1..close].trim().trim_end_matches(',').to_string();
    let ret = decl[close + 1..].trim();
    let ret = if ret.is_empty() { String::new() } else { format!(" {ret}") };
    (name, params, ret)
}
