// modeltool/repack.cpp — `colibri-model repack IN OUT ...`: rewrite an image with other
// dtypes or alignment, or convert between the image and its zstd distribution form.
// Output is always written atomically (temp file + rename); IN is never modified.
#include <zstd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "image/dtype_convert.h"
#include "image/reader.h"
#include "image/writer.h"
#include "model/config.h"
#include "model/header_fields.h"
#include "model/tensor_names.h"
#include "modeltool/cli_support.h"
#include "modeltool/commands.h"
#include "util/atomic_file.h"
#include "util/strings.h"
#include "util/thread_pool.h"

namespace colibri::modeltool {

using util::strprintf;

namespace {

struct RepackRequest {
  std::string in, out;
  bool force = false;
  bool quiet = false;
  bool compress = false, decompress = false;
  bool change_dtype = false;
  image::DType dtype = image::DType::F16;
  uint32_t group_size = image::kQ8DefaultGroupSize;
  uint64_t alignment = 0;  // 0 = keep
  int zstd_level = 3;
  unsigned threads = 0;
  ProgressStyle progress;
};

Error compress_image(const RepackRequest &r) {
  Error error;
  image::OpenOptions open_options;
  open_options.advice = image::MapAdvice::Sequential;
  auto img = image::Image::open(r.in, open_options, &error);
  if (!img) return error;
  util::AtomicFile out;
  if (Error e = out.open(r.out, r.force)) return e;
  note_removed_stale("repack", out.removed_stale());
  ZSTD_CCtx *cctx = ZSTD_createCCtx();
  if (!cctx) return make_error(ErrorKind::OutOfMemory, "cannot create a zstd compression context");
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, r.zstd_level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  unsigned workers = r.threads ? r.threads : std::max(1u, std::thread::hardware_concurrency());
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, static_cast<int>(workers));  // ignored by single-threaded libzstd
  ZSTD_CCtx_setPledgedSrcSize(cctx, img->file_size());
  std::vector<char> buffer(ZSTD_CStreamOutSize());
  const unsigned char *base = img->bytes();
  const uint64_t chunk = 4ull << 20;
  Progress progress("compress", img->file_size(), r.progress);
  Error result;
  for (uint64_t pos = 0; pos < img->file_size() || pos == 0;) {
    if (interrupted()) {
      result = interrupted_error();
      break;
    }
    uint64_t n = std::min(chunk, img->file_size() - pos);
    bool last = pos + n == img->file_size();
    ZSTD_inBuffer input{base + pos, static_cast<size_t>(n), 0};
    bool finished = false;
    while (!finished) {
      ZSTD_outBuffer output{buffer.data(), buffer.size(), 0};
      size_t remaining = ZSTD_compressStream2(cctx, &output, &input, last ? ZSTD_e_end : ZSTD_e_continue);
      if (ZSTD_isError(remaining)) {
        result = make_error(ErrorKind::Internal, strprintf("zstd: %s", ZSTD_getErrorName(remaining)));
        break;
      }
      if (Error e = out.write(buffer.data(), output.pos)) {
        result = e;
        break;
      }
      finished = last ? remaining == 0 : input.pos == input.size;
    }
    if (result) break;
    pos += n;
    progress.update(pos);
    if (last) break;
  }
  ZSTD_freeCCtx(cctx);
  progress.finish();
  if (result) return result;
  if (Error e = out.commit()) return e;
  if (!r.quiet)
    std::printf("wrote %s: %s -> %s (ratio %.3f)\n", r.out.c_str(), util::human_bytes(img->file_size()).c_str(),
                util::human_bytes(out.position()).c_str(),
                static_cast<double>(out.position()) / static_cast<double>(img->file_size()));
  return {};
}

Error decompress_image(const RepackRequest &r) {
  FILE *in = std::fopen(r.in.c_str(), "rb");
  if (!in) {
    int e = errno;
    return make_error(ErrorKind::Io, strprintf("cannot open '%s': %s", r.in.c_str(), util::errno_text(e).c_str()));
  }
  unsigned char magic[4] = {};
  size_t got = std::fread(magic, 1, 4, in);
  if (got < 4 || !(magic[0] == 0x28 && magic[1] == 0xB5 && magic[2] == 0x2F && magic[3] == 0xFD)) {
    std::fclose(in);
    return make_error(ErrorKind::NotAnImage,
                      strprintf("'%s' is not zstd-compressed (expected 0x28B52FFD, got %s); --decompress reads the "
                                ".colibri.zst files that 'repack --compress' writes",
                                r.in.c_str(), util::hex_bytes_as_u64(magic, got).c_str()));
  }
  std::fseek(in, 0, SEEK_END);
  uint64_t in_size = static_cast<uint64_t>(std::ftell(in));
  std::fseek(in, 0, SEEK_SET);
  util::AtomicFile out;
  if (Error e = out.open(r.out, r.force)) {
    std::fclose(in);
    return e;
  }
  note_removed_stale("repack", out.removed_stale());
  ZSTD_DCtx *dctx = ZSTD_createDCtx();
  std::vector<char> in_buffer(ZSTD_DStreamInSize()), out_buffer(ZSTD_DStreamOutSize());
  Error result;
  size_t last_ret = 0;
  uint64_t consumed = 0;
  Progress progress("decompress", in_size, r.progress);
  while (!result) {
    if (interrupted()) {
      result = interrupted_error();
      break;
    }
    size_t n = std::fread(in_buffer.data(), 1, in_buffer.size(), in);
    if (n == 0) break;
    consumed += n;
    ZSTD_inBuffer input{in_buffer.data(), n, 0};
    while (input.pos < input.size) {
      ZSTD_outBuffer output{out_buffer.data(), out_buffer.size(), 0};
      last_ret = ZSTD_decompressStream(dctx, &output, &input);
      if (ZSTD_isError(last_ret)) {
        result = make_error(ErrorKind::Corrupt, strprintf("'%s': zstd stream is damaged: %s", r.in.c_str(),
                                                          ZSTD_getErrorName(last_ret)));
        break;
      }
      if (Error e = out.write(out_buffer.data(), output.pos)) {
        result = e;
        break;
      }
    }
    progress.update(consumed);
  }
  progress.finish();
  bool read_error = std::ferror(in) != 0;
  std::fclose(in);
  ZSTD_freeDCtx(dctx);
  if (result) return result;
  if (read_error) return make_error(ErrorKind::Io, strprintf("reading '%s' failed", r.in.c_str()));
  if (last_ret != 0)
    return make_error(ErrorKind::Corrupt, strprintf("'%s' is truncated: the zstd stream ends before its last frame "
                                                    "is complete; copy the file again",
                                                    r.in.c_str()));
  // The result must be a valid image before it takes the output name.
  if (Error e = out.flush()) return e;
  Error error;
  auto check = image::Image::open(out.temp_path(), {}, &error);
  if (!check)
    return make_error(error.kind, "the decompressed data is not a valid image: " + error.message);
  check.reset();
  if (Error e = out.commit()) return e;
  if (!r.quiet) std::printf("wrote %s: %s\n", r.out.c_str(), util::human_bytes(out.position()).c_str());
  return {};
}

// Converts one tensor row by row from the source to the target dtype and appends it.
struct TensorReport {
  double max_abs_error = 0.0;
  double error_bound = 0.0;  // q8: max scale / 2; f16/bf16: half an ulp of the largest magnitude; q4, q8f16, mxfp4: 0 (none given)
};

// More threads than this is a typo, not a machine.
constexpr unsigned kMaxRepackThreads = 1024;

// Rows per parallel chunk: about kChunkOutputBytes of output each, so the staging stays small
// and the writer appends while memory is warm.
constexpr uint64_t kChunkOutputBytes = 8u << 20;

// One row's part of a TensorReport, merged in row order after each chunk.
struct RowReport {
  size_t bad_column;      // first value the target cannot store (cols if none)
  float bad_value;
  double max_abs_error;   // the row's largest |value - stored value|
  double max_abs_value;   // f16/bf16 targets: the row's largest finite magnitude
  float max_scale;        // q8: the row's largest group scale
};

Error convert_tensor(const image::Image &img, const image::TensorInfo &t, image::DType target, uint32_t group,
                     util::ThreadPool &pool, image::ImageWriter *writer,
                     TensorReport *report) {
  const unsigned char *src = img.data(t);
  uint64_t cols = t.shape[t.rank - 1];
  uint64_t rows = t.element_count() / cols;
  if (target == t.dtype && (!image::is_block_dtype(target) || group == t.group_size))
    return interrupted() ? interrupted_error() : writer->append(src, t.size);  // same layout: copy
  const uint64_t src_row = image::row_bytes(t.dtype, t.group_size, cols);
  const uint64_t dst_row = image::row_bytes(target, group, cols);
  const uint64_t chunk_rows = std::max<uint64_t>(1, kChunkOutputBytes / dst_row);
  const size_t threads = pool.thread_count();
  // Per thread: the decoded row and its round trip; per chunk row: the output and the report.
  std::vector<float> values(threads * cols), back(threads * cols);
  // Two output buffers: the pool fills one while the appender writes the other.
  std::vector<unsigned char> buffers[2];
  buffers[0].resize(std::min(rows, chunk_rows) * dst_row);
  if (rows > chunk_rows) buffers[1].resize(buffers[0].size());
  image::ChunkAppender appender(writer);
  std::vector<RowReport> row_reports(std::min(rows, chunk_rows));
  float max_scale = 0.0f;
  double max_abs_value = 0.0;
  for (uint64_t r0 = 0, chunk = 0; r0 < rows; r0 += chunk_rows, ++chunk) {
    if (interrupted()) return interrupted_error();
    const uint64_t n = std::min(chunk_rows, rows - r0);
    unsigned char *encoded = buffers[chunk % 2].data();
    // Rows are independent: each is decoded, checked and encoded by one thread; the results
    // do not depend on the thread count (the reports are merged in row order below).
    pool.parallel_for(n, [&](size_t i, size_t thread) {
      float *v = values.data() + thread * cols, *b = back.data() + thread * cols;
      const unsigned char *row = src + (r0 + i) * src_row;
      unsigned char *out = encoded + i * dst_row;
      RowReport &rr = row_reports[i];
      rr = {cols, 0.0f, 0.0, 0.0, 0.0f};
      if (image::is_block_dtype(t.dtype)) image::dequantize_row(t.dtype, t.group_size, row, cols, v);
      else image::decode_floats(t.dtype, row, cols, v);
      rr.bad_column = image::first_unstorable(target, v, cols);
      if (rr.bad_column != cols) {
        rr.bad_value = v[rr.bad_column];
        return;
      }
      if (target == image::DType::Q8) {
        rr.max_abs_error = image::quantize_row_q8(v, cols, group, out, &rr.max_scale);
      } else if (image::is_block_dtype(target)) {  // q4, q8f16, mxfp4: the error measured, no bound given
        rr.max_abs_error = image::quantize_row_measured(target, group, v, cols, out, b);
      } else {
        image::encode_floats(target, v, cols, out);
        image::decode_floats(target, out, cols, b);
        image::round_trip_extremes(v, b, cols, &rr.max_abs_value, &rr.max_abs_error);
      }
    });
    for (uint64_t i = 0; i < n; ++i) {  // the first bad row of the chunk is the first of the tensor
      const RowReport &rr = row_reports[i];
      if (rr.bad_column != cols)
        return make_error(ErrorKind::NonFinite,
                          strprintf("tensor '%s' holds %g at row %llu, column %zu: %s. Repack to --dtype %s instead",
                                    t.name.c_str(), static_cast<double>(rr.bad_value),
                                    static_cast<unsigned long long>(r0 + i), rr.bad_column,
                                    image::unstorable_reason(target), image::storable_alternatives(target)));
      report->max_abs_error = std::max(report->max_abs_error, rr.max_abs_error);
      max_abs_value = std::max(max_abs_value, rr.max_abs_value);
      max_scale = std::max(max_scale, rr.max_scale);
    }
    if (Error e = appender.submit(encoded, n * dst_row)) return e;
  }
  if (Error e = appender.wait()) return e;
  if (target == image::DType::Q8) {
    report->error_bound = max_scale / 2.0;
  } else if (target == image::DType::F16 || target == image::DType::BF16) {
    int mantissa_bits = target == image::DType::F16 ? 10 : 7;
    int exponent = max_abs_value > 0 ? static_cast<int>(std::floor(std::log2(max_abs_value))) : 0;
    if (target == image::DType::F16) exponent = std::max(exponent, -14);
    report->error_bound = std::ldexp(1.0, exponent - mantissa_bits - 1);
  }
  return {};
}

Error rewrite_image(const RepackRequest &r) {
  Error error;
  image::OpenOptions open_options;
  open_options.advice = image::MapAdvice::Sequential;
  auto img = image::Image::open(r.in, open_options, &error);
  if (!img) return error;
  const image::FileHeader &h = img->header();
  std::vector<image::TensorSpec> specs;
  for (const image::TensorInfo &t : img->tensors()) {
    image::TensorSpec s;
    s.name = t.name;
    s.shape.assign(t.shape, t.shape + t.rank);
    s.dtype = t.dtype;
    s.group_size = t.group_size;
    if (r.change_dtype) {
      uint64_t cols = t.shape[t.rank - 1];
      model::names::StoragePolicy policy;
      policy.requested = r.dtype;
      policy.group_size = r.group_size;
      if (std::string why = model::names::policy_error(policy); !why.empty())
        return make_error(ErrorKind::InvalidArgument, why);
      const model::names::StorageChoice choice = model::names::storage_choice(policy, t.name, t.rank, cols);
      s.dtype = choice.dtype;
      s.group_size = choice.group_size;
      if (s.dtype == image::DType::F32 && !image::is_block_dtype(t.dtype) && r.dtype != image::DType::F32 && t.rank < 2)
        s.dtype = t.dtype;  // vectors keep their stored type
      const bool same = s.dtype == t.dtype && s.group_size == t.group_size;
      if (!same && image::is_block_dtype(s.dtype) && image::is_block_dtype(t.dtype))
        return make_error(ErrorKind::InvalidArgument,
                          strprintf("tensor '%s' is already %s with group size %u; %s/%u is only made from float "
                                    "types (repack to f32 first)",
                                    t.name.c_str(), image::dtype_name(t.dtype), t.group_size,
                                    image::dtype_name(s.dtype), s.group_size));
    }
    specs.push_back(std::move(s));
  }
  // The header's model fields come from the model metadata (model::header_fields, the one
  // definition every open checks), so a repack also repairs a header that disagrees with its
  // metadata. An image of tensors only (no valid "model" metadata) keeps its header's values.
  image::ModelHeaderFields fields;
  model::ModelConfig config;
  auto model_meta = img->metadata().find("model");
  if (model_meta != img->metadata().end() && model::ModelConfig::from_json(*model_meta, &config).ok()) {
    fields = model::header_fields(config, specs);
  } else {
    fields.expert_count = h.expert_count;
    fields.hidden_size = h.hidden_size;
    fields.ffn_hidden_size = h.ffn_hidden_size;
    fields.top_k = h.top_k;
    fields.layer_count = h.layer_count;
    for (const image::TensorInfo &t : img->tensors())
      if (h.gate_weight_offset != 0 && t.offset == h.gate_weight_offset) fields.gate_tensor_name = t.name;
    fields.expert_size_bytes = model::names::expert_size_bytes(specs, h.expert_count);
  }
  image::WriterOptions writer_options;
  writer_options.alignment = r.alignment ? r.alignment : h.data_alignment;
  writer_options.overwrite = r.force;
  image::ImageWriter writer;
  if (Error e = writer.begin(r.out, writer_options, fields, specs, std::string(img->metadata_json()))) return e;
  note_removed_stale("repack", writer.removed_stale());
  uint64_t total = 0, done = 0;
  for (const auto &t : img->tensors()) total += t.size;
  Progress progress("repack", total, r.progress);
  std::vector<TensorReport> reports(specs.size());
  util::ThreadPoolOptions pool_options;
  pool_options.thread_count = r.threads;  // 0: the CPUs this process may use
  std::unique_ptr<util::ThreadPool> pool =
      util::ThreadPool::create(pool_options, "repack's conversion threads (--threads)", &error);
  if (!pool) return error;
  for (size_t i = 0; i < specs.size(); ++i) {
    const image::TensorInfo &t = img->tensors()[i];
    if (Error e = convert_tensor(*img, t, specs[i].dtype, specs[i].group_size, *pool, &writer, &reports[i]))
      return e;
    done += t.size;
    progress.update(done, t.name);
  }
  progress.finish();
  if (Error e = writer.finish()) return e;
  if (!r.quiet) {
    std::printf("%-40s %-6s -> %-6s %14s %14s\n", "tensor", "from", "to", "max_abs_err", "bound");
    for (size_t i = 0; i < specs.size(); ++i) {
      const image::TensorInfo &t = img->tensors()[i];
      bool changed = specs[i].dtype != t.dtype || specs[i].group_size != t.group_size;
      if (!changed) continue;
      std::printf("%-40s %-6s -> %-6s %14.6g %14.6g\n", t.name.c_str(), image::dtype_name(t.dtype),
                  image::dtype_name(specs[i].dtype), reports[i].max_abs_error, reports[i].error_bound);
    }
    std::printf("wrote %s\n", r.out.c_str());
  }
  return {};
}

}  // namespace

int run_repack(int argc, char **argv) {
  cxxopts::Options options("colibri-model repack",
                           "Rewrite an image with other dtypes or alignment, or to/from the zstd distribution form. "
                           "Without options, rewrite it as it is: the header's model fields are recomputed from the "
                           "metadata and the padding is zeroed.");
  options.add_options()("dtype",
                        "convert matrix weights to f32|f16|bf16|q8|q8f16|q4|mxfp4 (vectors and routers stay f32; "
                        "q4 and mxfp4: the experts, the other matrices q8f16)",
                        cxxopts::value<std::string>())(
      "group-size", "group size along each row: q8 32 or 64, q4 32, 64 or 128", cxxopts::value<uint32_t>()->default_value("32"))(
      "alignment", "tensor alignment in bytes (power of two, 64..2097152; --align is the same)", cxxopts::value<uint64_t>())(
      "compress", "write the zstd distribution form (.colibri.zst)")(
      "decompress", "restore the byte-identical image from a .colibri.zst")(
      "level", "zstd level for --compress (1..19)", cxxopts::value<int>()->default_value("3"))(
      "threads", "worker threads for dtype conversion and zstd (0 = all the CPUs this process may use)", cxxopts::value<unsigned>()->default_value("0"))(
      "f,force", "overwrite OUT if it exists")("q,quiet", "print nothing on success")("h,help", "show this help")(
      "in", "input", cxxopts::value<std::string>())("out", "output", cxxopts::value<std::string>());
  add_progress_flags(options);
  options.parse_positional({"in", "out"});
  options.positional_help("IN OUT");
  int code = kExitOk;
  auto args = parse_or_report(options, argc, argv, &code);
  if (!args) return code;
  auto usage = [&](const std::string &why) {
    std::fprintf(stderr, "colibri-model repack: %s\n\n%s", why.c_str(), options.help().c_str());
    return kExitUsage;
  };
  if (!args->count("in") || !args->count("out")) return usage("needs IN and OUT");
  RepackRequest r;
  r.in = (*args)["in"].as<std::string>();
  r.out = (*args)["out"].as<std::string>();
  r.force = args->count("force") > 0;
  r.quiet = args->count("quiet") > 0;
  if (!read_progress_flags(options, *args, &r.progress, &code)) return code;
  if (r.quiet) r.progress.enabled = false;
  r.compress = args->count("compress") > 0;
  r.decompress = args->count("decompress") > 0;
  r.zstd_level = (*args)["level"].as<int>();
  r.threads = (*args)["threads"].as<unsigned>();
  r.group_size = (*args)["group-size"].as<uint32_t>();
  if (r.group_size != 32 && r.group_size != 64 && r.group_size != 128)
    return usage(strprintf("--group-size %u: use 32 or 64 (q8), 32, 64 or 128 (q4)", r.group_size));
  if (r.zstd_level < 1 || r.zstd_level > 19) return usage(strprintf("--level %d: use 1..19", r.zstd_level));
  if (r.threads > kMaxRepackThreads)
    return usage(strprintf("--threads %u: use 0 (all CPUs) to %u", r.threads, kMaxRepackThreads));
  if (args->count("dtype")) {
    r.change_dtype = true;
    std::string name = (*args)["dtype"].as<std::string>();
    if (!image::dtype_from_name(name.c_str(), &r.dtype))
      return usage("--dtype '" + name + "': use f32, f16, bf16, q8, q8f16, q4 or mxfp4");
  }
  if (args->count("alignment")) {
    r.alignment = (*args)["alignment"].as<uint64_t>();
    if (r.alignment < image::kMinAlignment || r.alignment > image::kMaxAlignment || (r.alignment & (r.alignment - 1)))
      return usage(strprintf("--alignment %llu: use a power of two from 64 to 2097152",
                             static_cast<unsigned long long>(r.alignment)));
  }
  if (r.compress && r.decompress) return usage("--compress and --decompress exclude each other");
  if ((r.compress || r.decompress) && (r.change_dtype || r.alignment))
    return usage("--compress/--decompress copy the image byte for byte; run --dtype/--alignment as a separate repack");
  // Without options the image is rewritten as it is: same tensors, dtypes and alignment, the
  // header's model fields recomputed from the metadata and the padding zeroed (what repairs an
  // image that verify calls inconsistent in those two ways).
  if (r.in == r.out || util::same_file(r.in, r.out))
    return usage("OUT is the same file as IN; repack never rewrites its input in place: choose another OUT");

  install_interrupt_handler();  // Ctrl-C: stop within a chunk, remove the temporary output
  Error e = r.compress ? compress_image(r) : r.decompress ? decompress_image(r) : rewrite_image(r);
  if (e) return report_error("repack", e);
  return kExitOk;
}

}  // namespace colibri::modeltool
