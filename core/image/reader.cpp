// core/image/reader.cpp — mmap + validation of model images.
#include "image/reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <thread>

#include "image/writer.h"
#include "util/json.h"
#include "util/strings.h"

namespace colibri::image {

using util::strprintf;

static unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

// How far a run of zeros after the magic is measured for the message (the pages of a sparse
// file read as zeros without disk I/O).
constexpr uint64_t kZeroScanBytes = uint64_t{1} << 20;

uint64_t TensorInfo::element_count() const {
  uint64_t n = 1;
  for (uint32_t i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (uint32_t i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// What an mmap's ENOMEM means: a limit, named with its value. The address-space limit
// (ulimit -v, RLIMIT_AS) counts every mapping; the kernel's commit accounting
// (vm.overcommit_memory) counts only writable private memory, so only the loaded copy; the
// map count (vm.max_map_count) rarely, since an image is one mapping.
static std::string mapping_limit_hint(uint64_t bytes, bool anonymous) {
  struct rlimit limit{};
  std::string address_space = "unlimited";
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    address_space = util::human_bytes(static_cast<uint64_t>(limit.rlim_cur));
  std::string hint = strprintf(" (%s of address space were refused). The limits that refuse a mapping: the "
                               "process's address-space limit, ulimit -v (RLIMIT_AS), here %s: raise it (ulimit -v "
                               "unlimited) or run without it",
                               util::human_bytes(bytes).c_str(), address_space.c_str());
  if (anonymous) {
    int mode = -1;
    if (FILE *f = std::fopen("/proc/sys/vm/overcommit_memory", "re")) {
      if (std::fscanf(f, "%d", &mode) != 1) mode = -1;
      std::fclose(f);
    }
    hint += strprintf("; or the kernel's overcommit policy (vm.overcommit_memory, here %s; in mode 2 this copy "
                      "counts against CommitLimit in /proc/meminfo)",
                      mode < 0 ? "unknown" : std::to_string(mode).c_str());
  } else {
    hint += "; or the number of mappings (vm.max_map_count). A read-only file mapping does not count against "
            "the overcommit limit";
  }
  return hint;
}

Image::~Image() {
  if (fd_ >= 0) ::close(fd_);
  if (mapped_ && base_) {
    if (locked_) ::munlock(base_, mapping_size_);
    ::munmap(const_cast<unsigned char *>(base_), mapping_size_);
  }
}

const TensorInfo *Image::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

std::unique_ptr<Image> Image::open(const std::string &path, const OpenOptions &options, Error *error) {
  auto fail = [&](ErrorKind kind, std::string message) -> std::unique_ptr<Image> {
    *error = make_error(kind, std::move(message));
    return nullptr;
  };
  const char *p = path.c_str();
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever, before
  // the regular-file check below could refuse it. It changes nothing for a regular file.
  int fd = ::open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    struct stat st;
    if (e == ENOENT) return fail(ErrorKind::Io, strprintf("cannot open '%s': %s; check the path", p, util::errno_text(e).c_str()));
    if (e == EACCES)
      return fail(ErrorKind::Io, strprintf("cannot open '%s': %s; check the file's permissions (ls -l %s) or run "
                                           "as a user that may read it",
                                           p, util::errno_text(e).c_str(), p));
    if (::stat(p, &st) == 0 && S_ISDIR(st.st_mode))
      return fail(ErrorKind::Io, strprintf("'%s' is a directory, not a model image", p));
    return fail(ErrorKind::Io, strprintf("cannot open '%s': %s", p, util::errno_text(e).c_str()));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return fail(ErrorKind::Io, strprintf("cannot stat '%s': %s", p, util::errno_text(e).c_str()));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return fail(ErrorKind::Io,
                strprintf("'%s' is a directory, not a model image. If it is a Hugging Face checkpoint, convert it "
                          "with: colibri-model convert %s -o OUT.colibri",
                          p, p));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(ErrorKind::Io, strprintf("'%s' is not a regular file (device, pipe or socket); images must be "
                                         "regular files that can be memory-mapped",
                                         p));
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderSize) {
    unsigned char head[kHeaderSize] = {};
    // A size of 0 is read anyway: pseudo-files (/proc, /sys) report 0 and have content, and
    // "empty" would send the user after an interrupted download that never happened.
    ssize_t n = ::pread(fd, head, size ? size : kHeaderSize, 0);
    ::close(fd);
    uint64_t got = n > 0 ? static_cast<uint64_t>(n) : 0;
    if (size > 0 && got >= 8 && std::memcmp(head, kMagic, 8) == 0)
      return fail(ErrorKind::Corrupt,
                  strprintf("'%s' is truncated: %llu bytes, smaller than the %llu-byte header; copy the image again",
                            p, ull(size), ull(kHeaderSize)));
    *error = diagnose_foreign_file(head, got, size, path);
    return nullptr;
  }
  int flags = MAP_PRIVATE | (options.populate ? MAP_POPULATE : 0);
  void *map = ::mmap(nullptr, size, PROT_READ, flags, fd, 0);
  int map_errno = errno;
  if (map == MAP_FAILED) ::close(fd);
  if (map == MAP_FAILED)
    return fail(ErrorKind::Io, strprintf("cannot memory-map '%s' (%llu bytes): %s%s", p, ull(size),
                                         util::errno_text(map_errno).c_str(),
                                         map_errno == ENOMEM ? mapping_limit_hint(size, false).c_str() : ""));

  std::unique_ptr<Image> image(new Image());
  image->base_ = static_cast<const unsigned char *>(map);
  image->size_ = size;
  image->mapping_size_ = size;
  image->mapped_ = true;
  image->fd_ = fd;  // closed by the destructor; check_unchanged compares it with `st`
  image->opened_device_ = static_cast<uint64_t>(st.st_dev);
  image->opened_inode_ = static_cast<uint64_t>(st.st_ino);
  image->opened_mtime_seconds_ = static_cast<int64_t>(st.st_mtim.tv_sec);
  image->opened_mtime_nanoseconds_ = static_cast<int64_t>(st.st_mtim.tv_nsec);
  image->label_ = path;
  if (Error e = image->validate()) {
    *error = e;
    return nullptr;
  }
  int advice = -1;
  switch (options.advice) {
    case MapAdvice::Normal: break;
    case MapAdvice::Sequential: advice = MADV_SEQUENTIAL; break;
    case MapAdvice::WillNeed: advice = MADV_WILLNEED; break;
    case MapAdvice::Random: advice = MADV_RANDOM; break;
    case MapAdvice::HugePage: advice = MADV_HUGEPAGE; break;
  }
  if (advice >= 0) ::madvise(map, size, advice);  // advisory: failure changes nothing
  if (options.lock) {
    if (::mlock(map, size) != 0) {
      int e = errno;
      return fail(ErrorKind::Io, strprintf("cannot mlock '%s' (%s): %s; raise the memlock limit (ulimit -l) or "
                                           "open without locking",
                                           p, util::human_bytes(size).c_str(), util::errno_text(e).c_str()));
    }
    image->locked_ = true;
  }
  if (options.verify_checksums) {
    if (Error e = image->verify_all(0)) {
      *error = e;
      return nullptr;
    }
  }
  return image;
}

Error Image::load_into_memory(const std::function<Error(unsigned char *, uint64_t)> &before_fill, bool lock) {
  if (!mapped_ || loaded_) return make_error(ErrorKind::InvalidArgument, "load_into_memory: the image is not a file mapping");
  // Whole 2 MiB pages: transparent huge pages need 2 MiB-aligned 2 MiB extents; the kernel
  // places a large anonymous mapping 2 MiB-aligned when THP is enabled.
  constexpr uint64_t kHugePage = uint64_t{2} << 20;
  const uint64_t bytes = (size_ + kHugePage - 1) / kHugePage * kHugePage;
  void *memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    int e = errno;
    return make_error(ErrorKind::Io, strprintf("cannot allocate %s to load '%s' into memory: %s%s; open it mapped "
                                               "instead (without load-into-memory) or free memory",
                                               util::human_bytes(bytes).c_str(), label_.c_str(), util::errno_text(e).c_str(),
                                               e == ENOMEM ? mapping_limit_hint(bytes, true).c_str() : ""));
  }
  auto *copy = static_cast<unsigned char *>(memory);
  auto release = [&] { ::munmap(memory, bytes); };
#ifdef MADV_HUGEPAGE
  ::madvise(memory, bytes, MADV_HUGEPAGE);  // advisory: without THP the copy has 4 KiB pages
#endif
  if (before_fill) {
    if (Error e = before_fill(copy, bytes)) {
      release();
      return e;
    }
  }
  // Copy the mapping front to back (sequential advice: the kernel reads ahead far) in 64 MiB
  // chunks, unmapping each chunk's source pages once copied, so that the process does not
  // hold the file's pages and the copy at the same time (its peak RSS would be twice the image).
  auto *source = const_cast<unsigned char *>(base_);
  ::madvise(source, size_, MADV_SEQUENTIAL);
  constexpr uint64_t kChunk = uint64_t{64} << 20;
  for (uint64_t off = 0; off < size_; off += kChunk) {
    const uint64_t n = std::min(kChunk, size_ - off);
    std::memcpy(copy + off, source + off, n);
    if (!locked_) ::madvise(source + off, n, MADV_DONTNEED);  // read-only file pages: the page cache keeps them
  }
  if (::mprotect(memory, bytes, PROT_READ) != 0) {  // a stray write into weights now faults
    int e = errno;
    release();
    return make_error(ErrorKind::Io, strprintf("cannot make the loaded copy of '%s' read-only: %s", label_.c_str(),
                                               util::errno_text(e).c_str()));
  }
  if (lock && ::mlock(memory, bytes) != 0) {
    int e = errno;
    release();
    return make_error(ErrorKind::Io, strprintf("cannot mlock the loaded copy of '%s' (%s): %s; raise the memlock limit "
                                               "(ulimit -l) or load without locking",
                                               label_.c_str(), util::human_bytes(bytes).c_str(), util::errno_text(e).c_str()));
  }
  if (locked_) ::munlock(base_, mapping_size_);
  ::munmap(const_cast<unsigned char *>(base_), mapping_size_);
  base_ = copy;
  mapping_size_ = bytes;
  locked_ = lock;
  loaded_ = true;
  ::close(fd_);  // the copy does not change with the file: nothing left to check
  fd_ = -1;
  return {};
}

std::unique_ptr<Image> Image::from_memory(const unsigned char *bytes, uint64_t size, const std::string &label,
                                          Error *error) {
  if (size < kHeaderSize) {
    if (size >= 8 && std::memcmp(bytes, kMagic, 8) == 0) {
      *error = make_error(ErrorKind::Corrupt, strprintf("'%s' is truncated: %llu bytes, smaller than the %llu-byte "
                                                        "header; copy the image again",
                                                        label.c_str(), ull(size), ull(kHeaderSize)));
    } else {
      *error = diagnose_foreign_file(bytes, size, size, label);
    }
    return nullptr;
  }
  std::unique_ptr<Image> image(new Image());
  image->base_ = bytes;
  image->size_ = size;
  image->label_ = label;
  if (Error e = image->validate()) {
    *error = e;
    return nullptr;
  }
  return image;
}

// Validation order: identity (magic, version) → sizes of the regions → header checksum →
// each directory entry → relations between entries → metadata is a JSON object.
Error Image::validate() {
  const char *p = label_.c_str();
  std::memcpy(&header_, base_, sizeof header_);
  auto corrupt = [&](std::string m) { return make_error(ErrorKind::Corrupt, strprintf("'%s': %s", p, m.c_str())); };
  // A header field found wrong before the header checksum is checked: the header itself is
  // damaged (a checksum would only say so later, without naming the field).
  auto header_field = [&](const char *field, const std::string &what) {
    return corrupt(strprintf("header field %s %s: the image's header is damaged. Copy the image again (or "
                             "re-convert it), then check it with: colibri-model verify %s",
                             field, what.c_str(), p));
  };

  if (std::memcmp(header_.magic, kMagic, 8) != 0) return diagnose_foreign_file(base_, std::min<uint64_t>(size_, 64), size_, label_);
  // The magic and then nothing: every header field zero. A real image never has version 0;
  // this is the first block of a copy whose data was never written (a failed sparse write,
  // space preallocated with fallocate, a copy that died after its first write).
  if (header_.version == 0) {
    const uint64_t scan = std::min(size_, kZeroScanBytes);
    uint64_t zeros = 0;
    while (sizeof header_.magic + zeros < scan && base_[sizeof header_.magic + zeros] == 0) ++zeros;
    if (sizeof header_.magic + zeros >= kHeaderSize)
      return corrupt(strprintf("the Colibri magic is followed by %s%llu zero bytes (every header field is zero): the "
                               "image's data was never written (a failed sparse write, preallocated space or an "
                               "interrupted copy). Copy the image again (or re-convert it), then check it with: "
                               "colibri-model verify %s",
                               sizeof header_.magic + zeros == scan && scan < size_ ? "at least " : "", ull(zeros), p));
  }
  if (header_.version > kFormatVersion)
    return make_error(ErrorKind::Unsupported,
                      strprintf("'%s': image version %u is newer than this build supports (max %u); upgrade "
                                "Colibri to read it",
                                p, header_.version, kFormatVersion));
  if (header_.version < kMinReadableVersion)
    return make_error(ErrorKind::Unsupported,
                      strprintf("'%s': image version %u is older than this build supports (min %u); convert the "
                                "checkpoint again with this colibri-model",
                                p, header_.version, kMinReadableVersion));
  if (header_.header_size != kHeaderSize)
    return header_field("header_size", strprintf("is %u, format version %u has %llu", header_.header_size,
                                                 header_.version, ull(kHeaderSize)));
  if (header_.file_size != size_) {
    if (header_.file_size > size_)
      return corrupt(strprintf("truncated: the header says the image is %llu bytes, the file has %llu (%llu bytes "
                               "missing); copy the image again",
                               ull(header_.file_size), ull(size_), ull(header_.file_size - size_)));
    return corrupt(strprintf("the header says the image is %llu bytes but the file has %llu (%llu unexpected bytes "
                             "at the end): appended data or a damaged header; copy the image again",
                             ull(header_.file_size), ull(size_), ull(size_ - header_.file_size)));
  }
  uint64_t align = header_.data_alignment;
  if (align < kMinAlignment || align > kMaxAlignment || (align & (align - 1)) != 0)
    return header_field("data_alignment", strprintf("is %llu, not a power of two in [%llu, %llu]", ull(align),
                                                    ull(kMinAlignment), ull(kMaxAlignment)));
  if (header_.tensor_count > kMaxTensorCount)
    return header_field("tensor_count", strprintf("is %llu, over the format limit of %llu", ull(header_.tensor_count),
                                                  ull(kMaxTensorCount)));
  if (header_.directory_offset != kHeaderSize)
    return header_field("directory_offset", strprintf("is %llu, expected %llu (right after the header)",
                                                      ull(header_.directory_offset), ull(kHeaderSize)));
  uint64_t entries_bytes = header_.tensor_count * kTensorEntrySize;
  if (header_.directory_size < entries_bytes || header_.directory_size > size_ - kHeaderSize)
    return header_field("directory_size",
                        strprintf("is %llu, which does not fit %llu entries of %llu bytes within the file (%llu bytes)",
                                  ull(header_.directory_size), ull(header_.tensor_count), ull(kTensorEntrySize),
                                  ull(size_)));
  uint64_t directory_end = kHeaderSize + header_.directory_size;
  if (header_.metadata_offset != directory_end)
    return header_field("metadata_offset", strprintf("is %llu, expected %llu (right after the directory)",
                                                     ull(header_.metadata_offset), ull(directory_end)));
  if (header_.metadata_size > kMaxMetadataSize || header_.metadata_size > size_ - directory_end)
    return header_field("metadata_size",
                        strprintf("is %llu: metadata of %llu bytes at offset %llu %s", ull(header_.metadata_size),
                                  ull(header_.metadata_size), ull(header_.metadata_offset),
                                  header_.metadata_size > kMaxMetadataSize
                                      ? strprintf("is over the format limit of %llu bytes", ull(kMaxMetadataSize)).c_str()
                                      : strprintf("extends beyond the end of the file (%llu bytes)", ull(size_)).c_str()));
  uint64_t metadata_end = directory_end + header_.metadata_size;

  uint64_t computed = header_checksum(header_, base_ + kHeaderSize, header_.directory_size,
                                      base_ + header_.metadata_offset, header_.metadata_size);
  if (computed != header_.header_checksum)
    return corrupt(strprintf("header checksum mismatch: stored %s, computed %s; the header, tensor directory or "
                             "metadata is damaged. Copy the image again (or re-convert it)",
                             util::hex64(header_.header_checksum).c_str(), util::hex64(computed).c_str()));

  const unsigned char *strings = base_ + kHeaderSize + entries_bytes;
  uint64_t strings_size = header_.directory_size - entries_bytes;
  tensors_.clear();
  tensors_.reserve(header_.tensor_count);
  by_name_.clear();
  for (uint64_t i = 0; i < header_.tensor_count; ++i) {
    TensorEntry e;
    std::memcpy(&e, base_ + kHeaderSize + i * kTensorEntrySize, sizeof e);
    if (e.name_length == 0 || e.name_length > kMaxNameLength || e.name_offset > strings_size ||
        e.name_length > strings_size - e.name_offset)
      return corrupt(strprintf("tensor #%llu: name (offset %llu, length %u) lies outside the string table (%llu bytes)",
                               ull(i), ull(e.name_offset), e.name_length, ull(strings_size)));
    TensorInfo t;
    t.name.assign(reinterpret_cast<const char *>(strings + e.name_offset), e.name_length);
    if (t.name.find('\0') != std::string::npos)
      return corrupt(strprintf("tensor #%llu: name contains a NUL byte", ull(i)));
    const char *tn = t.name.c_str();
    if (!dtype_is_valid(e.dtype))
      return corrupt(strprintf("tensor '%s': unknown dtype code %u (this build knows 0..%u)", tn, e.dtype,
                               kDTypeCount - 1));
    if (e.rank < 1 || e.rank > kMaxTensorRank)
      return corrupt(strprintf("tensor '%s': rank %u not in 1..%u", tn, e.rank, kMaxTensorRank));
    for (uint32_t d = e.rank; d < kMaxTensorRank; ++d)
      if (e.shape[d] != 0) return corrupt(strprintf("tensor '%s': unused shape dimension %u is not zero", tn, d));
    t.dtype = static_cast<DType>(e.dtype);
    if (min_version_for(t.dtype) > header_.version)
      return corrupt(strprintf("tensor '%s': dtype %s needs format version %u, but the image is version %u", tn,
                               dtype_name(t.dtype), min_version_for(t.dtype), header_.version));
    t.group_size = e.group_size;
    t.rank = e.rank;
    std::copy(e.shape, e.shape + kMaxTensorRank, t.shape);
    uint64_t expected = 0;
    if (!tensor_data_bytes(t.dtype, e.group_size, e.rank, e.shape, &expected))
      return corrupt(strprintf("tensor '%s': shape %s with dtype %s (group size %u) is invalid", tn,
                               t.shape_string().c_str(), dtype_name(t.dtype), e.group_size));
    if (expected != e.data_size)
      return corrupt(strprintf("tensor '%s': size %llu bytes, but %s %s needs %llu", tn, ull(e.data_size),
                               dtype_name(t.dtype), t.shape_string().c_str(), ull(expected)));
    if (e.data_offset % align != 0)
      return corrupt(strprintf("tensor '%s' is misaligned: offset %llu is not a multiple of the %llu-byte alignment",
                               tn, ull(e.data_offset), ull(align)));
    if (e.data_offset < metadata_end)
      return corrupt(strprintf("tensor '%s' at offset %llu overlaps the header/directory/metadata (which end at %llu)",
                               tn, ull(e.data_offset), ull(metadata_end)));
    if (e.data_offset > size_ || e.data_size > size_ - e.data_offset)
      return corrupt(strprintf("tensor '%s' [%llu, %llu) extends beyond the end of the file (%llu bytes)", tn,
                               ull(e.data_offset), ull(e.data_offset) + ull(e.data_size), ull(size_)));
    t.offset = e.data_offset;
    t.size = e.data_size;
    t.checksum = e.checksum;
    tensors_.push_back(std::move(t));
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!by_name_.emplace(std::string_view(tensors_[i].name), i).second)
      return corrupt(strprintf("tensor name '%s' appears twice in the directory", tensors_[i].name.c_str()));
  }
  // Overlaps: sort by offset and compare neighbours.
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorInfo &a = tensors_[order[i - 1]];
    const TensorInfo &b = tensors_[order[i]];
    if (a.offset + a.size > b.offset)
      return corrupt(strprintf("tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", a.name.c_str(),
                               ull(a.offset), ull(a.offset + a.size), b.name.c_str(), ull(b.offset),
                               ull(b.offset + b.size)));
  }
  uint64_t first = order.empty() ? header_.weight_data_offset : tensors_[order.front()].offset;
  if (header_.weight_data_offset != first)
    return corrupt(strprintf("weight data offset %llu does not match the first tensor's offset %llu",
                             ull(header_.weight_data_offset), ull(first)));
  if (header_.gate_weight_offset != 0) {
    bool found = false;
    for (const TensorInfo &t : tensors_) found = found || t.offset == header_.gate_weight_offset;
    if (!found)
      return corrupt(strprintf("gate weight offset %llu is not the start of any tensor", ull(header_.gate_weight_offset)));
  }
  if (Error e = util::parse_json(metadata_json(), "the metadata section", &metadata_)) return corrupt(e.message);
  if (!metadata_.is_object()) return corrupt("the metadata section is not a JSON object");
  return {};
}

Error Image::check_unchanged() const {
  if (fd_ < 0 || loaded_) return {};
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    int e = errno;
    return make_error(ErrorKind::Io, strprintf("cannot stat the open image '%s': %s", label_.c_str(),
                                               util::errno_text(e).c_str()));
  }
  const uint64_t now_size = static_cast<uint64_t>(st.st_size);
  const bool same = now_size == size_ && static_cast<uint64_t>(st.st_dev) == opened_device_ &&
                    static_cast<uint64_t>(st.st_ino) == opened_inode_ &&
                    static_cast<int64_t>(st.st_mtim.tv_sec) == opened_mtime_seconds_ &&
                    static_cast<int64_t>(st.st_mtim.tv_nsec) == opened_mtime_nanoseconds_;
  if (same) return {};
  return make_error(ErrorKind::Io,
                    strprintf("'%s': the image was truncated or replaced while in use: size %llu → %llu%s; reopen "
                              "it. Its bytes under the mapping are not the ones opened (reading past the new end would "
                              "crash the process). Replace an image in use by writing the new one elsewhere and "
                              "renaming it over the old (as colibri-model does), never by cp over it",
                              label_.c_str(), ull(size_), ull(now_size),
                              now_size == size_ ? ", modified since it was opened" : ""));
}

Error Image::verify_tensor(const TensorInfo &tensor) const {
  uint64_t computed = checksum_bytes(data(tensor), tensor.size);
  if (computed != tensor.checksum)
    return make_error(ErrorKind::Corrupt,
                      strprintf("'%s': tensor '%s' checksum mismatch: stored %s, computed %s; its bytes at [%llu, "
                                "%llu) are damaged. Copy the image again (or re-convert it)",
                                label_.c_str(), tensor.name.c_str(), util::hex64(tensor.checksum).c_str(),
                                util::hex64(computed).c_str(), ull(tensor.offset), ull(tensor.offset + tensor.size)));
  return {};
}

Error Image::verify_all(unsigned threads) const {
  if (Error e = check_unchanged()) return e;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<size_t>(threads, std::max<size_t>(1, tensors_.size())));
  // Each thread takes tensors from a shared counter; the first failure in directory order wins.
  std::atomic<size_t> next{0};
  std::vector<Error> results(tensors_.size());
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < tensors_.size(); i = next.fetch_add(1)) results[i] = verify_tensor(tensors_[i]);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error &) {
      // The OS refused a thread (EAGAIN: a limit on threads). Checksums need no particular
      // thread count: the threads started, and this one, check every tensor.
      break;
    }
  }
  work();
  for (auto &th : pool) th.join();
  for (Error &e : results)
    if (e) return e;
  return {};
}

}  // namespace colibri::image
