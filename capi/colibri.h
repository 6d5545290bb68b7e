/*
 * colibri.h — the public C API of libcolibri (ABI version 1), a Mixture-of-Experts LLM
 * inference engine. This header is the reference documentation; docs/api.md is the guide.
 *
 * ======================================================================================
 *  Conventions (they hold for every function unless its comment says otherwise)
 * ======================================================================================
 *
 *  Language    C99 and C++ (any version), only <stddef.h> and <stdint.h>. No bool, no enums
 *              and no bitfields in the ABI: flags and enumerated values are fixed-width
 *              integers with COLIBRI_* constants.
 *
 *  Status      Every function that can fail returns an int32_t status: COLIBRI_OK (0), a
 *              positive non-error (COLIBRI_DONE), or a negative COLIBRI_ERROR_* code. The set
 *              of codes is closed and documented below; a code never changes meaning; new
 *              codes may be added in later versions, so treat an unknown negative value as an
 *              error. colibri_status_string() names a code. The exceptions are the destructors
 *              (void, accept NULL) and the pure getters (colibri_abi_version,
 *              colibri_version_string, colibri_status_string, colibri_dtype_name,
 *              colibri_stage_name), which cannot fail.
 *
 *  Errors      A failing call also stores a message for the calling thread (what failed, the
 *              object — file, tensor, option — and how to fix it). colibri_last_error() copies
 *              it into a caller buffer. Every call that returns a status >= 0 clears it (when it
 *              returns: a failure of a call made from inside one of its callbacks does not
 *              outlive it). The message is per thread: a runtime that moves a task between OS
 *              threads between two native calls (Go) must read it in the same native call as
 *              the failing one.
 *
 *  Ownership   Handles are opaque. colibri_*_open / _create return an owned handle through an
 *              out parameter (set to NULL on failure); colibri_*_close / _free take it back and
 *              accept NULL. Strings and arrays passed in are borrowed for the duration of the
 *              call unless stated. Pointers handed out (const char *, const float *) are owned by
 *              the library; each function says how long they stay valid.
 *
 *  Misuse      Handles are checked on entry, where that is cheap and memory-safe:
 *              - Every handle carries a tag (its type, live or freed). A handle that was already
 *                closed or freed, a handle of another type, or a pointer that is not a handle
 *                gives COLIBRI_ERROR_BAD_STATE naming the misuse ("session (0x...) was already
 *                freed"); a destructor given one does nothing and records BAD_STATE in
 *                colibri_last_error (it cannot return a status; a destructor that frees
 *                leaves the last error as it was). So a double free, or a call on a freed
 *                handle, is caught.
 *              - Caught reliably for the last 1024 handles freed in the process: their small
 *                shells stay allocated (everything they owned is released at once) with the
 *                tag poisoned. An older freed handle, or a pointer to memory that is not a
 *                handle, is read as it is: its tag is almost surely wrong (BAD_STATE), but the
 *                memory may have been reused or unmapped (then the read itself faults).
 *                Addresses below 64 KiB and misaligned ones are refused without a read.
 *              - This holds for every handle type: model, session, stream, sampler, engine
 *                and request.
 *              - Not caught: a handle freed by one thread while another thread's call on it
 *                (other than those with a busy word, below) is running; a pointer into
 *                unmapped memory.
 *              - A sampler has a busy word: a call on it while another thread's call runs gets
 *                BAD_STATE "the sampler is in use by another thread", and colibri_sampler_free
 *                then frees nothing (BAD_STATE recorded). So has a request's pull stream
 *                (colibri_request_next; its other calls are thread-safe).
 *              - A session has a busy word: while one call runs on it, a call from another
 *                thread gets BAD_STATE "the session is in use by another thread", a call from
 *                inside one of its callbacks (colibri_piece_fn, colibri_expert_fn) gets
 *                BAD_STATE saying that a callback called back into its session, and
 *                colibri_session_free in either case frees nothing (BAD_STATE recorded). A
 *                session's streams share that word. Nothing is run twice at once, so misuse
 *                from several threads cannot reach the engine; it is still misuse (calls are
 *                refused, not queued). The check costs a tag load, a compare-and-swap and a store per call.
 *
 *  Buffers     Functions that produce variable-size output write into caller buffers and
 *              report the size they need: a NULL buffer with capacity 0 is a size query
 *              (COLIBRI_OK, required size in the size out parameter); a buffer that is too
 *              small gives COLIBRI_ERROR_BUFFER_TOO_SMALL with the required size filled in and
 *              the buffer contents unspecified. Text sizes exclude the terminating NUL, but the
 *              buffer needs room for it (capacity >= size + 1). Text is UTF-8.
 *
 *  Options     Options structs begin with `uint32_t struct_size`. Fill them with the matching
 *              colibri_*_options_init(&options, sizeof options), then change fields. Fields are
 *              only ever appended: a program built against an older header keeps working with a
 *              newer library (missing fields take their defaults), and a program built against
 *              a newer header works with an older library as long as the fields that library
 *              does not know are left at zero (otherwise COLIBRI_ERROR_UNSUPPORTED names the
 *              field offset). Passing NULL for an options pointer means "all defaults".
 *              Output structs (colibri_model_info, ...) also begin with struct_size, which the
 *              caller sets to sizeof(the struct) before the call; the library fills what fits.
 *              A struct_size more than 4096 bytes beyond the library's own struct is taken for
 *              an uninitialised one: INVALID_ARGUMENT, nothing past struct_size itself touched.
 *              No struct is ever passed by value.
 *
 *  Threads     Stated per function. In short: the library functions are thread-safe; a model
 *              is immutable and may be shared by any number of threads and sessions; a session
 *              (and a stream or sampler) is used by one thread at a time (for sessions, their
 *              streams, samplers and a request's colibri_request_next this is checked: see
 *              "Misuse"), and different
 *              sessions of one model run concurrently; callbacks run on the thread that made
 *              the call that invokes them, before that call returns.
 *
 *  Versions    COLIBRI_VERSION_* describe this header's release; colibri_version_string() the
 *              loaded library's. COLIBRI_ABI_VERSION is the ABI generation, equal to the SONAME
 *              number (libcolibri.so.1): it changes only on an incompatible change, which never
 *              happens within a generation. A dynamic loader compares colibri_abi_version()
 *              with the COLIBRI_ABI_VERSION it was compiled with.
 *
 *  Units       Sizes in names: _bytes are bytes, _count are elements, _ns are nanoseconds.
 *              Token ids are int32_t. Logits are float32, row-major [rows, vocab_size].
 */
#ifndef COLIBRI_H
#define COLIBRI_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  if defined(COLIBRI_BUILDING_LIBRARY)
#    define COLIBRI_API __declspec(dllexport)
#  else
#    define COLIBRI_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) || defined(__clang__)
#  define COLIBRI_API __attribute__((visibility("default")))
#else
#  define COLIBRI_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================
 *  Versions
 * ====================================================================================== */

#define COLIBRI_VERSION_MAJOR 0
#define COLIBRI_VERSION_MINOR 1
#define COLIBRI_VERSION_PATCH 0
#define COLIBRI_VERSION_STRING "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, for #if comparisons. */
#define COLIBRI_VERSION_NUMBER (COLIBRI_VERSION_MAJOR * 10000 + COLIBRI_VERSION_MINOR * 100 + COLIBRI_VERSION_PATCH)
/* The ABI generation: the N of the SONAME libcolibri.so.N. */
#define COLIBRI_ABI_VERSION 1

/* The ABI generation of the loaded library (COLIBRI_ABI_VERSION it was built with).
 * Thread-safe; never fails. */
COLIBRI_API uint32_t colibri_abi_version(void);

/* The loaded library's release, "MAJOR.MINOR.PATCH" (a static string). Thread-safe. */
COLIBRI_API const char *colibri_version_string(void);

/* ======================================================================================
 *  Status codes (closed set; values never change meaning)
 * ====================================================================================== */

#define COLIBRI_OK 0
/* Not an error: a stream has no more pieces. */
#define COLIBRI_DONE 1
/* Not an error: nothing is ready yet (colibri_request_next's wait ended first). */
#define COLIBRI_PENDING 2

/* An argument is out of range, NULL where a value is required, or inconsistent with the
 * model or the session (a token id >= vocab_size, a layer that is not an MoE layer, ...). */
#define COLIBRI_ERROR_INVALID_ARGUMENT (-1)
/* The operating system refused: missing file, permission denied, a directory, mmap or mlock
 * failure. The message carries the errno text. Also: the image file was truncated or
 * rewritten in place while the model was open (checked before each forward pass; reopen it). */
#define COLIBRI_ERROR_IO (-2)
/* The file is not a Colibri image (empty, text, GGUF, safetensors, zip, zstd, ...). The
 * message says what it is and the command that converts it. */
#define COLIBRI_ERROR_NOT_AN_IMAGE (-3)
/* The file is an image but damaged: truncated, bad checksum, inconsistent directory. */
#define COLIBRI_ERROR_CORRUPT (-4)
/* Valid, but this build lacks the feature: newer image version, unknown dtype or family, a
 * tokenizer component or chat-template construct it does not implement, an option value or
 * an options field this library version does not know. */
#define COLIBRI_ERROR_UNSUPPORTED (-5)
/* NaN or Inf came out of a guarded stage of the forward pass (the non-finite policy is
 * COLIBRI_NON_FINITE_ERROR, or the stage is the final norm or the logits, which are always
 * checked), or a caller's logits hold NaN or +inf (colibri_sampler_sample). The message
 * names the stage and the position, e.g. "logits are not finite at position 5 of sequence 0
 * (stage: output_norm; batch row 0)". No token is generated from such logits. */
#define COLIBRI_ERROR_NON_FINITE (-6)
/* An allocation failed, or the operating system refused to start a thread (a limit on
 * threads: the message names it). The handle involved is still valid. */
#define COLIBRI_ERROR_OUT_OF_MEMORY (-7)
/* The caller's buffer is too small; the size out parameter holds the size needed. */
#define COLIBRI_ERROR_BUFFER_TOO_SMALL (-8)
/* The sequence would grow beyond the session's context_length. Reset it or create the
 * session with a larger context. Nothing was processed. */
#define COLIBRI_ERROR_CONTEXT_FULL (-9)
/* The call is not valid in the handle's current state: no logits yet, the session has an
 * open stream, the stream's session was freed; or the handle is misused (see "Misuse"
 * above): already freed or closed, of another type, not a handle, a session in use by
 * another thread or called from inside its own callback. */
#define COLIBRI_ERROR_BAD_STATE (-10)
/* A caller callback (colibri_expert_fn) returned non-zero; the operation was abandoned. */
#define COLIBRI_ERROR_CALLBACK (-11)
/* A bug in libcolibri (an unexpected exception). The message keeps what was caught; please
 * report it. The handles involved should be freed. */
#define COLIBRI_ERROR_INTERNAL (-12)
/* A bounded queue is full (colibri_request_submit: the engine's max_sequences requests run and
 * queue_capacity more wait already). Nothing was queued; try again later. */
#define COLIBRI_ERROR_BUSY (-13)

/* A static English name for a status code: "ok", "done", "invalid argument", ...; "unknown
 * status" for a value not in the set. Thread-safe; never fails; never NULL. */
COLIBRI_API const char *colibri_status_string(int32_t status);

/* Copies the calling thread's last error message into buffer (NUL-terminated, truncated at a
 * UTF-8 character boundary if buffer_size is too small; buffer may be NULL when buffer_size is
 * 0). *message_size (optional, may be NULL) receives the full message length in bytes,
 * without the NUL. Returns the status code of the last failed call on this thread, or
 * COLIBRI_OK when the thread's last call succeeded (message ""). Does not change the stored
 * error. Thread-safe (reads only the calling thread's state). */
COLIBRI_API int32_t colibri_last_error(char *buffer, size_t buffer_size, size_t *message_size);

/* ======================================================================================
 *  Logging
 * ====================================================================================== */

#define COLIBRI_LOG_DEBUG 0
#define COLIBRI_LOG_INFO 1
#define COLIBRI_LOG_WARNING 2
#define COLIBRI_LOG_ERROR 3
/* As min_level: deliver nothing. */
#define COLIBRI_LOG_OFF 4

/* Receives one message (NUL-terminated, no trailing newline) at `level`. It runs on the
 * thread that made the library call that logs, possibly on several threads at once: it must
 * be thread-safe. It must not call back into libcolibri. */
typedef void (*colibri_log_fn)(void *user, int32_t level, const char *message);

/* Installs the process-wide log callback: messages with level >= min_level go to fn(user, ...).
 * fn NULL (the initial state) disables logging. The library logs model opens and session
 * creation (threads, kernels, memory) at INFO and, at DEBUG, every failing call with its
 * message. Thread-safe; calls already running may still deliver to the previous callback
 * until they return. Errors: INVALID_ARGUMENT for a min_level outside
 * COLIBRI_LOG_DEBUG..COLIBRI_LOG_OFF. */
COLIBRI_API int32_t colibri_set_log_callback(colibri_log_fn fn, void *user, int32_t min_level);

/* ======================================================================================
 *  Enumerated values
 * ====================================================================================== */

/* Element types (the image format's values). */
#define COLIBRI_DTYPE_F32 0
#define COLIBRI_DTYPE_F16 1
#define COLIBRI_DTYPE_BF16 2
/* int8 weights with one f32 scale per group of group_size values along the last dimension. */
#define COLIBRI_DTYPE_Q8 3
/* Image format version 2 (weights only; docs/format.md): symmetric int4 with one f16 scale per
 * group of 32, 64 or 128; int8 with one f16 scale per 32 (llama.cpp's Q8_0 block); OCP MX FP4
 * (e2m1 values, one e8m0 scale per 32: gpt-oss's experts). */
#define COLIBRI_DTYPE_Q4 4
#define COLIBRI_DTYPE_Q8F16 5
#define COLIBRI_DTYPE_MXFP4 6

/* "f32", "f16", "bf16", "q8", "q4", "q8f16", "mxfp4", or "unknown". Static string. Thread-safe. */
COLIBRI_API const char *colibri_dtype_name(uint32_t dtype);

/* How the kernel should page the mapped image (madvise). HUGEPAGE, the default, asks for 2 MiB
 * pages: where the file system caches files in large folios (ext4 and XFS on Linux 6.x), the
 * pages it reads in come as 2 MiB folios and are mapped with 2 MiB pages, so streaming the
 * weights does not miss the TLB every 4 KiB. It costs no memory. Pages already cached in small
 * folios (a file copied with cp, say) stay small until the page cache drops them
 * (docs/performance.md, "2 MiB page-cache folios"). */
#define COLIBRI_ADVICE_NORMAL 0
#define COLIBRI_ADVICE_SEQUENTIAL 1
#define COLIBRI_ADVICE_WILLNEED 2
#define COLIBRI_ADVICE_RANDOM 3
#define COLIBRI_ADVICE_HUGEPAGE 4

/* What happens when NaN or Inf comes out of a guarded stage of the forward pass: the token
 * embedding, and in every layer the attention output, the MoE input and the MoE or dense FFN
 * output. The final norm and the logits are checked too, and a non-finite row there always
 * fails with COLIBRI_ERROR_NON_FINITE (a zeroed row would make every token equally likely).
 * Each check is one pass over a row just written (docs/numerics.md gives the cost). */
#define COLIBRI_NON_FINITE_DEFAULT 0 /* model options: ERROR; session options: the model's */
#define COLIBRI_NON_FINITE_ERROR 1   /* the call fails with COLIBRI_ERROR_NON_FINITE */
#define COLIBRI_NON_FINITE_ZERO 2    /* zero the row, count it in colibri_stats.non_finite_rows */

/* Pinning worker threads to CPUs. */
#define COLIBRI_PIN_DEFAULT 0 /* model options: OFF; session options: the model's */
#define COLIBRI_PIN_OFF 1
#define COLIBRI_PIN_ON 2

/* NUMA placement (libnuma.so.1, loaded at run time if installed: the library does not link
 * it). BIND and INTERLEAVE copy the weights into anonymous memory whose policy is set before
 * the copy fills it (as load_into_memory does): the pages of a file mapping are the page cache,
 * which no policy places. Every node used is one the process may use: a process started under
 * `numactl --cpunodebind=A --membind=B` (or in a cpuset) keeps its threads on A and its memory
 * on B, and a policy outside them is an INVALID_ARGUMENT error naming both. Where libnuma is
 * missing or the kernel lacks NUMA, OFF, INTERLEAVE and BIND to node 0 are accepted and place
 * nothing. colibri_model_info.numa_report says what was done and where the weight pages are,
 * measured. BIND to a node that does not exist is an INVALID_ARGUMENT error naming the reason;
 * to a node without room for the weights, OUT_OF_MEMORY. */
#define COLIBRI_NUMA_DEFAULT 0    /* model options: OFF; session options: the model's */
#define COLIBRI_NUMA_OFF 1
#define COLIBRI_NUMA_BIND 2       /* weights (model) / threads (session) on numa_node */
#define COLIBRI_NUMA_INTERLEAVE 3 /* weight pages interleaved over the nodes the process may
                                     use; threads where they are */

/* The widest CPU instruction set a session's kernels may use (colibri_session_options.max_isa).
 * The kernels of one level give the same bits on every CPU that has it, but two levels differ
 * in the last bits (logits within ~1e-5, docs/numerics.md): a fleet that wants identical outputs
 * on AVX2 and AVX-512 machines caps every session at AVX2. A cap above what the CPU has gives
 * the best level it has; colibri_session_info.backend names the level in use. */
#define COLIBRI_ISA_AUTO 0   /* the best the CPU has */
#define COLIBRI_ISA_SCALAR 1 /* portable C++, any x86-64 (the same as force_scalar = 1) */
#define COLIBRI_ISA_AVX2 2   /* AVX2 + FMA + F16C */
#define COLIBRI_ISA_AVX512 3 /* AVX-512 F/BW/VL/DQ (and VNNI for q8 where present) */

/* Where a session's forward pass runs (colibri_session_options.device_kind). */
#define COLIBRI_DEVICE_CPU 0  /* the CPU kernels (max_isa) */
#define COLIBRI_DEVICE_CUDA 1 /* an NVIDIA GPU, device device_index (the CUDA backend module) */

/* Why a generation ended. */
#define COLIBRI_FINISH_NONE 0      /* still running */
#define COLIBRI_FINISH_LENGTH 1    /* max_tokens generated */
#define COLIBRI_FINISH_EOS 2       /* an end-of-sequence token was sampled (not in the text) */
#define COLIBRI_FINISH_STOP 3      /* a stop string was generated (not in the text) */
#define COLIBRI_FINISH_CANCELLED 4 /* the piece callback returned non-zero; a request was
                                      cancelled (colibri_request_cancel / _free, engine freed) */
#define COLIBRI_FINISH_DEADLINE 5  /* a request's timeout_ns passed before it ended */
#define COLIBRI_FINISH_ERROR 6     /* a request failed; colibri_request_next returned its error */

/* colibri_tokenize flags (bitwise or). */
#define COLIBRI_TOKENIZE_ADD_SPECIAL 1u   /* add BOS/EOS as the tokenizer's post-processor says */
#define COLIBRI_TOKENIZE_PARSE_SPECIAL 2u /* special-token text in the input becomes the special
                                             token (default: it is ordinary text, for safety) */

/* colibri_detokenize flags. */
#define COLIBRI_DETOKENIZE_SKIP_SPECIAL 1u /* leave special tokens (BOS, EOS, ...) out */

/* colibri_sampler_options.seed: use the session's seed (colibri_session_options.seed). */
#define COLIBRI_SEED_FROM_SESSION UINT64_MAX

/* ======================================================================================
 *  Model: open, close, info, tensors
 * ====================================================================================== */

typedef struct colibri_model colibri_model;

typedef struct colibri_model_options {
  uint32_t struct_size;       /* sizeof(colibri_model_options), set by the init function */
  uint32_t populate;          /* 1: MAP_POPULATE, fault every page in at open. Default 0 */
  uint32_t advice;            /* COLIBRI_ADVICE_*. Default HUGEPAGE */
  uint32_t lock_memory;       /* 1: mlock the whole image; refusal (RLIMIT_MEMLOCK) is an IO
                                 error. Default 0 */
  uint32_t verify_checksums;  /* 1: check every tensor checksum at open (reads every byte).
                                 Default 0 (header, directory and metadata are always checked) */
  uint32_t threads;           /* threads for verification, and the default for sessions.
                                 0 (default) = every CPU this process may run on */
  uint32_t pin_threads;       /* COLIBRI_PIN_*: default for sessions. Default OFF */
  uint32_t non_finite_policy; /* COLIBRI_NON_FINITE_*: default for sessions. Default ERROR */
  uint32_t numa_policy;       /* COLIBRI_NUMA_*: placement of the weight pages (BIND and
                                 INTERLEAVE imply load_into_memory: the copy is placed before
                                 it is filled), and the default for sessions. Default OFF */
  uint32_t numa_node;         /* the node of COLIBRI_NUMA_BIND. Default 0 */
  uint32_t warm_up;           /* 1: read every weight page once at open (page cache and TLB
                                 warm; places nothing: pages already cached stay where they
                                 are). Nothing with a copy. Default 0 */
  uint32_t load_into_memory;  /* 1: copy the image into private anonymous memory advised for
                                 transparent huge pages and serve the weights from there
                                 instead of the file mapping. Decode streams the weights with
                                 fewer TLB misses (a few percent faster on the reference
                                 machine, docs/performance.md); costs one read of the file at
                                 open and the image's size in memory that is not shared with
                                 other processes. populate, advice and warm_up then do
                                 nothing; lock_memory and numa_policy apply to the copy.
                                 Default 0 (an appended field: a struct_size without it is
                                 still accepted and means 0) */
} colibri_model_options;

/* Fills *options with the defaults for a struct of struct_size bytes (pass sizeof *options).
 * Errors: INVALID_ARGUMENT (NULL, or struct_size smaller than the ABI-1 struct). Thread-safe. */
COLIBRI_API int32_t colibri_model_options_init(colibri_model_options *options, size_t struct_size);

/* Opens the image at `path` (a .colibri file): maps it read-only, validates the header,
 * directory and metadata, binds every weight the forward pass needs and loads the tokenizer.
 * options may be NULL (defaults). On success *model_out owns the model; on failure it is NULL
 * and the error message names the cause (empty file, GGUF given by mistake, truncated
 * download, wrong version, ...). An image whose tokenizer this build cannot load still opens:
 * the tokenizer functions then fail with UNSUPPORTED and that message.
 * Errors: INVALID_ARGUMENT, IO, NOT_AN_IMAGE, CORRUPT, UNSUPPORTED, OUT_OF_MEMORY.
 * Thread-safe (any number of opens at once). */
COLIBRI_API int32_t colibri_model_open(const char *path, const colibri_model_options *options,
                                       colibri_model **model_out);

/* Releases the caller's reference. Sessions created from the model keep it alive: its memory
 * is unmapped when the last of them is freed, so closing the model first is allowed. NULL is
 * a no-op; a model closed twice, or not a model, is recorded as BAD_STATE (see "Misuse").
 * Must not race with other calls that use this model handle. */
COLIBRI_API void colibri_model_close(colibri_model *model);

typedef struct colibri_model_info {
  uint32_t struct_size;             /* set by the caller: sizeof(colibri_model_info) */
  uint32_t format_version;          /* image format version of the file */
  /* Strings are static or owned by the model: valid until the model's memory is released. */
  const char *path;                 /* as given to colibri_model_open */
  const char *family;               /* "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "glm4_moe",
                                       "minimax_m2" */
  const char *architecture;         /* Hugging Face architecture, e.g. "MixtralForCausalLM" */
  uint64_t file_size_bytes;
  uint64_t parameter_count;         /* elements of every tensor (all experts) */
  uint64_t active_parameter_count;  /* parameters one token uses: every non-expert tensor plus
                                       top_k of the expert_count experts in each MoE layer */
  uint64_t active_weight_bytes;     /* bytes of weights one decode token reads (same rule):
                                       the denominator of a memory-bandwidth roofline */
  /* Hyper-parameters. */
  uint64_t vocab_size;
  uint64_t hidden_size;
  uint64_t layer_count;
  uint64_t moe_layer_count;         /* layers with an MoE FFN; the others are dense */
  uint64_t head_count;
  uint64_t kv_head_count;
  uint64_t head_dim;
  uint64_t max_position_embeddings;
  double rms_norm_eps;
  double rope_theta;
  double clip_qkv;                  /* 0 = no clipping */
  uint32_t tie_word_embeddings;     /* 1: the LM head is the token embedding */
  uint32_t attention_bias;          /* 1: q/k/v projections have biases */
  const char *qk_norm;              /* "none", "per_head" or "full" */
  /* Routing semantics (docs/numerics.md, "Rules"; per family: docs/convert.md, "Families"). */
  uint64_t expert_count;            /* experts per MoE layer */
  uint64_t expert_ffn_size;         /* intermediate size of one expert */
  uint64_t top_k;                   /* experts per token */
  const char *router_score;         /* "softmax" or "sigmoid": scores over experts in fp32 */
  uint32_t norm_topk_prob;          /* 1: the k selected weights are renormalised to sum 1 */
  uint32_t shared_expert_gate;      /* 1: shared expert output x sigmoid(gate . x) */
  uint64_t shared_expert_ffn_size;  /* 0 = no shared expert */
  uint64_t dense_ffn_size;          /* intermediate size of dense layers (0 = none) */
  /* Weights. */
  uint32_t weight_dtype;            /* COLIBRI_DTYPE_* of the expert weights */
  uint32_t weight_group_size;       /* Q8 group size, 0 for float dtypes */
  uint64_t tensor_count;
  /* Tokenizer and special tokens (-1 = none). */
  int32_t bos_token_id;
  int32_t eos_token_id;             /* the first EOS id; all of them: colibri_model_eos_tokens */
  int32_t pad_token_id;
  uint32_t eos_token_count;
  uint32_t add_bos_token;           /* 1: the tokenizer adds BOS with COLIBRI_TOKENIZE_ADD_SPECIAL */
  uint32_t add_eos_token;
  uint32_t has_tokenizer;           /* 1: the tokenizer loaded; 0: tokenizer calls fail */
  uint32_t has_chat_template;       /* 1: the image carries a chat template */
  const char *numa_report;          /* what the NUMA policy did and where the weight pages are,
                                       measured at open (the kernel's node of up to 1024 sampled
                                       pages): "off (weights in the file mapping); measured:
                                       node 0: 100% of 1024 sampled pages", "interleave: weights
                                       copied into memory interleaved over nodes 0-1; measured:
                                       node 0: 50%, node 1: 50% of 1024 sampled pages", or why
                                       nothing was placed or measured */
  /* Appended fields (a struct_size that ends before them is still accepted and gets the
   * fields it has). Sigmoid routers (router_score "sigmoid": GLM-4.5, MiniMax-M2) rank
   * score + a per-expert bias, optionally only within the best groups; docs/architecture.md §4. */
  uint64_t rotary_dim;              /* leading values of each head that RoPE rotates (head_dim
                                       unless the family uses partial rotary embeddings) */
  uint32_t router_select_bias;      /* 1: experts are chosen by score + bias, weighted by score */
  uint32_t expert_group_top;        /* experts come from the best expert_group_top groups */
  uint64_t expert_group_count;      /* equal groups of experts; 1 = no group limit */
  double routed_scaling_factor;     /* the k weights are multiplied by this (1 = none) */
  double topk_norm_epsilon;         /* added to the sum when the k weights are renormalised */
  const char *rope_scaling;         /* "none" or "yarn" (docs/architecture.md §3) */
  double rope_factor;               /* yarn's context factor (1 with "none") */
  double rope_attention_factor;     /* yarn's cos/sin multiplier (1 with "none") */
  /* Appended: gpt-oss's attention and experts (docs/architecture.md §4); 0 / "silu" elsewhere. */
  uint64_t sliding_window;          /* positions a sliding-window layer attends to, its own
                                       included (0: no sliding layer) */
  uint64_t sliding_layer_count;     /* layers with sliding-window attention (the rest: full) */
  uint32_t attention_sinks;         /* 1: a learned sink logit per head joins the softmax */
  uint32_t attention_output_bias;   /* 1: the output projection has a bias */
  uint32_t router_bias;             /* 1: the router linear has a bias */
  uint32_t expert_bias;             /* 1: the experts' gate, up and down projections have biases */
  const char *expert_activation;    /* "silu" (SiLU(gate) * up) or "swiglu_clamped" (gpt-oss) */
  double swiglu_limit;              /* swiglu_clamped: gate clamped above, up to +-limit (else 0) */
  double swiglu_alpha;              /* swiglu_clamped: gate * sigmoid(alpha * gate) (else 0) */
  /* Appended: multi-head latent attention (DeepSeek-V3, Kimi-K2; docs/architecture.md §3) and
   * the KV cache's size. With "mla", head_dim is the rotated part of a query head (its
   * qk_rope_head_dim), the cache keeps one latent of kv_lora_rank values plus one rope key of
   * head_dim per position and layer, and kv_head_count = head_count; "gqa": the ranks are 0. */
  const char *attention;            /* "gqa" or "mla" */
  uint64_t q_lora_rank;             /* mla: rank of the query's low-rank projection pair (0: direct) */
  uint64_t kv_lora_rank;            /* mla: values of the cached latent */
  uint64_t qk_nope_head_dim;        /* mla: query/key values per head without RoPE */
  uint64_t v_head_dim;              /* mla: value (output) values per head */
  double attention_scale;           /* the softmax scale of the scores: 1/sqrt(head_dim), or mla's
                                       (qk_nope + head_dim)^-1/2 with yarn's mscale_all_dim factor */
  uint64_t kv_cache_bytes_per_token; /* bytes one position takes in an f32 KV cache, all layers
                                       (an f16 cache: half): 2 x kv_heads x head_dim x 4 per
                                       layer, or (mla) (kv_lora_rank + head_dim) x 4 */
  uint64_t mtp_layer_count;         /* multi-token-prediction layers of the checkpoint (GLM-4.5,
                                       DeepSeek-V3): their tensors are kept in the image as
                                       mtp.<j>.* (colibri_model_tensor_info), never run */
  uint32_t rope_interleave;         /* 1: RoPE pairs are neighbours (x0, x1), (x2, x3), ... */
} colibri_model_info;

/* Fills *info (set info->struct_size first). Thread-safe. Errors: INVALID_ARGUMENT. */
COLIBRI_API int32_t colibri_model_get_info(const colibri_model *model, colibri_model_info *info);

/* Copies the model's end-of-sequence token ids (generation stops at any of them) into
 * ids[0..capacity). *count receives how many there are. Buffer rules above. Thread-safe. */
COLIBRI_API int32_t colibri_model_eos_tokens(const colibri_model *model, int32_t *ids, size_t capacity,
                                             size_t *count);

/* The image's metadata JSON (hyper-parameters, tokenizer, chat template, provenance): a
 * pointer into the mapping, *json_size bytes, NOT NUL-terminated, valid until the model's
 * memory is released. Thread-safe. */
COLIBRI_API int32_t colibri_model_metadata(const colibri_model *model, const char **json, size_t *json_size);

#define COLIBRI_MAX_TENSOR_RANK 4

typedef struct colibri_tensor_info {
  uint32_t struct_size;       /* set by the caller: sizeof(colibri_tensor_info) */
  uint32_t dtype;             /* COLIBRI_DTYPE_* */
  const char *name;           /* e.g. "blk.0.ffn_gate_exps.weight"; owned by the model */
  uint32_t rank;              /* used entries of shape */
  uint32_t group_size;        /* Q8 group size, 0 otherwise */
  uint64_t shape[COLIBRI_MAX_TENSOR_RANK]; /* outermost first; unused entries 0 */
  uint64_t offset_bytes;      /* from the start of the file */
  uint64_t size_bytes;
  uint64_t checksum;          /* XXH3-64 of the tensor's bytes */
} colibri_tensor_info;

/* Number of tensors in the image. Thread-safe. */
COLIBRI_API int32_t colibri_model_tensor_count(const colibri_model *model, size_t *count);

/* Describes tensor `index` (0..count-1, directory order). Thread-safe.
 * Errors: INVALID_ARGUMENT (index out of range, NULL). */
COLIBRI_API int32_t colibri_model_tensor_info(const colibri_model *model, size_t index, colibri_tensor_info *info);

/* The index of the tensor called `name`. Errors: INVALID_ARGUMENT when there is none.
 * Thread-safe. */
COLIBRI_API int32_t colibri_model_find_tensor(const colibri_model *model, const char *name, size_t *index);

/* ======================================================================================
 *  Tokenizer and chat template (the model's own; all thread-safe, the model is shared)
 * ====================================================================================== */

/* Encodes text[0..text_size) (UTF-8; text_size in bytes, need not be NUL-terminated) into
 * token ids. flags: COLIBRI_TOKENIZE_*. Writes tokens[0..*count). Buffer rules above.
 * Errors: INVALID_ARGUMENT, BUFFER_TOO_SMALL, UNSUPPORTED (no usable tokenizer). */
COLIBRI_API int32_t colibri_tokenize(const colibri_model *model, const char *text, size_t text_size,
                                     uint32_t flags, int32_t *tokens, size_t capacity, size_t *count);

/* Decodes tokens[0..token_count) into UTF-8 text (NUL-terminated; *text_size excludes the NUL).
 * flags: COLIBRI_DETOKENIZE_*. Invalid byte sequences become U+FFFD, as in Hugging Face. An id
 * of the model that its tokenizer lacks (checkpoints pad the vocabulary past the tokenizer's)
 * contributes no text, as in Hugging Face.
 * Errors: INVALID_ARGUMENT (a token id outside 0..vocab_size-1 of colibri_model_info),
 * BUFFER_TOO_SMALL, UNSUPPORTED. */
COLIBRI_API int32_t colibri_detokenize(const colibri_model *model, const int32_t *tokens, size_t token_count,
                                       uint32_t flags, char *text, size_t capacity, size_t *text_size);

/* The vocabulary string of one token, as stored in tokenizer.json (e.g. "▁the", "Ġthe",
 * "<0x0A>", "</s>"), NUL-terminated. To see what a token decodes to, use colibri_detokenize.
 * Errors: INVALID_ARGUMENT (token outside the vocabulary), BUFFER_TOO_SMALL, UNSUPPORTED. */
COLIBRI_API int32_t colibri_token_text(const colibri_model *model, int32_t token, char *text, size_t capacity,
                                       size_t *text_size);

/* One chat message. This element struct is frozen (it is used in arrays, so it cannot grow):
 * richer messages will come with a new function, never by changing this one. */
typedef struct colibri_chat_message {
  const char *role;    /* "system", "user", "assistant", ... NUL-terminated UTF-8 */
  const char *content; /* NUL-terminated UTF-8 */
} colibri_chat_message;

typedef struct colibri_chat_options {
  uint32_t struct_size;           /* sizeof(colibri_chat_options), set by the init function */
  uint32_t add_generation_prompt; /* 1 (default): end with the assistant turn's opening */
  const char *template_text;      /* NULL (default): the model's template; else a Jinja
                                     template to use instead (borrowed for the call) */
  const char *const *variable_names;  /* extra template variables, e.g. "enable_thinking" */
  const char *const *variable_values; /* their values as JSON text: "false", "\"text\"", "[...]";
                                         objects keep their key order (tojson prints it) */
  size_t variable_count;              /* entries of both arrays. Default 0 */
} colibri_chat_options;

/* Fills *options with the defaults (pass sizeof *options). Thread-safe. */
COLIBRI_API int32_t colibri_chat_options_init(colibri_chat_options *options, size_t struct_size);

/* Renders messages[0..message_count) with the model's chat template (as transformers'
 * apply_chat_template with tokenize=False) into text (NUL-terminated). Tokenize the result
 * without COLIBRI_TOKENIZE_ADD_SPECIAL (the template already writes the BOS text it wants)
 * and with COLIBRI_TOKENIZE_PARSE_SPECIAL, so that its special-token text becomes special tokens.
 * The template sees messages, add_generation_prompt, bos_token, eos_token and the extra
 * variables. options may be NULL. Errors: INVALID_ARGUMENT (NULL role/content, a variable value
 * that is not JSON or has an object of more than 4096 keys, a raise_exception in the template: the message is its text, a syntax error
 * in template_text), BUFFER_TOO_SMALL, UNSUPPORTED (no template, one using Jinja this build
 * does not implement, or one past a parser or render limit: nesting depth, output size, loop
 * iterations, ... (docs/reliability.md); the message names the template, the construct or
 * limit, and the line). A model template that cannot be parsed does not fail the open: plain
 * completion works and this function returns the parse error. */
COLIBRI_API int32_t colibri_chat_render(const colibri_model *model, const colibri_chat_message *messages,
                                        size_t message_count, const colibri_chat_options *options, char *text,
                                        size_t capacity, size_t *text_size);

/* ======================================================================================
 *  Session: KV cache, forward pass, logits
 * ====================================================================================== */

typedef struct colibri_session colibri_session;

typedef struct colibri_session_options {
  uint32_t struct_size;       /* sizeof(colibri_session_options), set by the init function */
  uint32_t context_length;    /* tokens per sequence. 0 (default) = min(max_position_embeddings,
                                 4096). Range 1..16777216 */
  uint32_t max_sequences;     /* independent sequences (KV slots). Default 1. Range 1..4096 */
  uint32_t max_batch_tokens;  /* tokens per forward call; longer prefills are split.
                                 Default 512. Range 1..65536 */
  uint32_t max_logit_rows;    /* logit rows one colibri_session_batch call may ask for.
                                 0 (default) = max_sequences; at most max_batch_tokens */
  uint32_t threads;           /* 0 (default) = the model's threads option */
  uint32_t pin_threads;       /* COLIBRI_PIN_*. Default: the model's */
  uint32_t non_finite_policy; /* COLIBRI_NON_FINITE_*. Default: the model's */
  uint32_t kv_dtype;          /* COLIBRI_DTYPE_F32 (default) or COLIBRI_DTYPE_F16 (half the
                                 memory; keys and values are rounded when written). Others give
                                 UNSUPPORTED */
  uint32_t force_scalar;      /* 1: use the portable scalar kernels (debugging). Default 0 */
  uint64_t seed;              /* default sampling seed of this session's generations.
                                 Default 0 */
  uint32_t numa_policy;       /* COLIBRI_NUMA_*: BIND runs the session's threads on
                                 numa_node's CPUs (those the process may use); when the calling
                                 thread may run elsewhere it then runs no share of the work
                                 itself. Default: the model's policy and node */
  uint32_t numa_node;         /* the node of COLIBRI_NUMA_BIND */
  uint32_t max_isa;           /* COLIBRI_ISA_*: the widest instruction set the kernels may use.
                                 Default AUTO (an appended field: a struct_size without it is
                                 still accepted and means AUTO) */
  uint32_t reserved0;         /* must be 0: names the padding after max_isa, so that the next
                                 appended field changes struct_size */
  uint32_t device_kind;       /* COLIBRI_DEVICE_*: where the forward pass runs. Default CPU (an
                                 appended field: a struct_size without it is still accepted and
                                 means CPU). CUDA needs a build with the CUDA backend (the module
                                 libcolibri_cuda.so next to the library), an NVIDIA driver and
                                 the device; without one of them colibri_session_create fails
                                 with UNSUPPORTED and a message starting "no CUDA device: " that
                                 names what is missing. A CUDA session: the weights are uploaded
                                 to the device at creation (the device's free memory is checked
                                 first: OUT_OF_MEMORY names the bytes needed and free), the KV
                                 cache lives there (contiguous only), threads, pin_threads,
                                 numa_*, max_isa and force_scalar do not apply; not yet
                                 implemented there (UNSUPPORTED): q8f16/q4/mxfp4 weights, the
                                 layer-level MoE call, the per-expert callback, the paged cache
                                 of the serving engine (docs/api.md, "Devices") */
  uint32_t device_index;      /* the N of COLIBRI_DEVICE_CUDA (cuda:N, CUDA's device order).
                                 Must be 0 with COLIBRI_DEVICE_CPU. Default 0. Range 0..1023 */
} colibri_session_options;

/* Fills *options with the defaults (pass sizeof *options). Thread-safe. */
COLIBRI_API int32_t colibri_session_options_init(colibri_session_options *options, size_t struct_size);

/* Creates a session on `model`: allocates the KV cache for max_sequences x context_length
 * tokens, the activation arena and a thread pool. Decoding performs no further allocation.
 * The session holds a reference on the model. options may be NULL.
 * Errors: INVALID_ARGUMENT (a field out of range; the message names it; also when the KV
 * cache would be unreasonably large), UNSUPPORTED, OUT_OF_MEMORY.
 * Thread-safe: any number of threads may create sessions on one model at once. */
COLIBRI_API int32_t colibri_session_create(colibri_model *model, const colibri_session_options *options,
                                           colibri_session **session_out);

/* Frees the session (and, if it was the last user of a closed model, the model). A stream
 * still open on it is detached: its next call fails with BAD_STATE and it must still be
 * closed. NULL is a no-op. While a call runs on the session (another thread's, or the one
 * whose callback this is) it frees nothing and records BAD_STATE; so does a session freed
 * twice (see "Misuse"). */
COLIBRI_API void colibri_session_free(colibri_session *session);

typedef struct colibri_session_info {
  uint32_t struct_size;       /* set by the caller: sizeof(colibri_session_info) */
  uint32_t context_length;    /* the effective values after defaults */
  uint32_t max_sequences;
  uint32_t max_batch_tokens;
  uint32_t max_logit_rows;
  uint32_t thread_count;
  uint32_t kv_dtype;
  uint32_t pin_threads;       /* COLIBRI_PIN_OFF or COLIBRI_PIN_ON */
  uint32_t non_finite_policy; /* COLIBRI_NON_FINITE_ERROR or COLIBRI_NON_FINITE_ZERO */
  uint32_t numa_policy;       /* COLIBRI_NUMA_OFF, _BIND or _INTERLEAVE */
  const char *backend;        /* static string: "cpu-avx512", "cpu-avx2", "cpu-scalar", or
                                 "cuda" (device_index of the options names the device) */
  uint64_t kv_cache_bytes;    /* bytes of the KV cache (a sliding-window layer keeps
                                 window + max_batch_tokens - 1 positions, not the context) */
  uint64_t seed;
  uint32_t numa_node;         /* the node of COLIBRI_NUMA_BIND */
  uint32_t reserved0;         /* 0 */
} colibri_session_info;

/* Fills *info (set info->struct_size first). One thread at a time per session. */
COLIBRI_API int32_t colibri_session_get_info(const colibri_session *session, colibri_session_info *info);

/* Forgets every sequence (positions restart at 0). Stats are kept. Errors: BAD_STATE (a
 * stream is open). One thread at a time per session. */
COLIBRI_API int32_t colibri_session_reset(colibri_session *session);

/* Forgets one sequence. Errors: INVALID_ARGUMENT (sequence >= max_sequences), BAD_STATE.
 * One thread at a time per session. */
COLIBRI_API int32_t colibri_session_reset_sequence(colibri_session *session, uint32_t sequence);

/* The number of tokens sequence `sequence` holds (the position the next token takes).
 * One thread at a time per session. */
COLIBRI_API int32_t colibri_session_sequence_length(const colibri_session *session, uint32_t sequence,
                                                    uint32_t *length);

/* Appends tokens[0..token_count) to sequence `sequence` (at its current length) and runs
 * them through the model, in chunks of max_batch_tokens. Afterwards the logits of the last
 * token are row 0 (colibri_session_logits). Errors: INVALID_ARGUMENT (empty, a token outside
 * the vocabulary, bad sequence), CONTEXT_FULL (nothing processed), NON_FINITE, BAD_STATE
 * (stream open), CALLBACK, OUT_OF_MEMORY, IO (the image file was truncated or rewritten in
 * place since the model was opened: reopen it). If a chunk fails after earlier chunks succeeded,
 * the sequence keeps the tokens processed so far (colibri_session_sequence_length tells).
 * One thread at a time per session. */
COLIBRI_API int32_t colibri_session_prefill(colibri_session *session, uint32_t sequence, const int32_t *tokens,
                                            size_t token_count);

/* Appends one token to sequence `sequence` and computes its logits (row 0). Same errors as
 * prefill. One thread at a time per session. */
COLIBRI_API int32_t colibri_session_decode(colibri_session *session, uint32_t sequence, int32_t token);

/* One forward pass over a batch of `count` entries (count <= max_batch_tokens), entry i being
 * token tokens[i] of sequence sequences[i] at position positions[i]. This is how several
 * sequences are decoded together, or logits of every prompt position are obtained.
 *   sequences   NULL: every entry in sequence 0.
 *   positions   NULL: each entry continues its sequence (its length, then +1 per entry).
 *               Otherwise a position must be at most the sequence's length (no gaps), and a
 *               sequence's entries in one batch must be consecutive. To start a sequence
 *               over, reset it (colibri_session_reset_sequence). Sliding-window models
 *               (gpt-oss) keep only window + max_batch_tokens - 1 positions in those layers:
 *               there a position may go back at most max_batch_tokens from the length.
 *   want_logits NULL: logits for the last entry only. Else non-zero marks the entries whose
 *               logits are computed, in entry order as rows 0, 1, ... (at most max_logit_rows).
 * Errors: as prefill; INVALID_ARGUMENT also for a position gap or too many logit rows.
 * One thread at a time per session. */
COLIBRI_API int32_t colibri_session_batch(colibri_session *session, const uint32_t *sequences,
                                          const uint32_t *positions, const int32_t *tokens,
                                          const uint32_t *want_logits, size_t count);

/* Logits of the last prefill / decode / batch call (or the last generation step): row `row`
 * of *row_count rows. *logits points at vocab_size floats owned by the session, valid until
 * the next call that runs the session (prefill, decode, batch, generate, stream, moe_layer,
 * reset) or its free. Any out parameter may be NULL except logits.
 * Errors: BAD_STATE (nothing computed yet), INVALID_ARGUMENT (row >= row count).
 * One thread at a time per session. */
COLIBRI_API int32_t colibri_session_logits(const colibri_session *session, size_t row, const float **logits,
                                           size_t *vocab_size, size_t *row_count);

/* Copies row `row` of the logits into buffer[0..capacity) (capacity in floats, at least
 * vocab_size). Errors: as colibri_session_logits, BUFFER_TOO_SMALL. One thread at a time
 * per session. */
COLIBRI_API int32_t colibri_session_copy_logits(const colibri_session *session, size_t row, float *buffer,
                                                size_t capacity);

/* ======================================================================================
 *  Sampling
 * ====================================================================================== */

/* The chain: repetition / presence / frequency penalties -> temperature -> top-k -> top-p ->
 * min-p -> seeded draw. temperature 0 is greedy (argmax, ties to the lower id). The same seed
 * and inputs give the same tokens on every machine and thread count. */
typedef struct colibri_sampler_options {
  uint32_t struct_size;       /* sizeof(colibri_sampler_options), set by the init function */
  float temperature;          /* 0..100. Default 0.8. 0 = greedy */
  uint32_t top_k;             /* Default 40. 0 = off */
  float top_p;                /* (0, 1]. Default 0.95. 1 = off */
  float min_p;                /* [0, 1]. Default 0.05. 0 = off; keeps p >= min_p * p_max */
  float repetition_penalty;   /* (0, 10]. Default 1 = off. HF rule: logit > 0 ? /= r : *= r */
  float presence_penalty;     /* -2..2. Default 0. Subtracted once from a seen token's logit */
  float frequency_penalty;    /* -2..2. Default 0. Subtracted per occurrence */
  uint32_t penalty_last_n;    /* 0..1048576 tokens of history the penalties see. Default 64; 0 = off */
  uint32_t reserved0;         /* must be 0 */
  uint64_t seed;              /* Default COLIBRI_SEED_FROM_SESSION (a standalone sampler: 0) */
} colibri_sampler_options;

/* Fills *options with the defaults (pass sizeof *options). Thread-safe. */
COLIBRI_API int32_t colibri_sampler_options_init(colibri_sampler_options *options, size_t struct_size);

typedef struct colibri_sampler colibri_sampler;

/* A standalone sampler over vocab_size logits, for callers that run their own loop with
 * colibri_session_decode. options may be NULL. Errors: INVALID_ARGUMENT (a field out of
 * range: the message names it), OUT_OF_MEMORY. Thread-safe. */
COLIBRI_API int32_t colibri_sampler_create(const colibri_sampler_options *options, size_t vocab_size,
                                           colibri_sampler **sampler_out);

/* Frees the sampler. NULL is a no-op; a sampler freed twice is recorded as BAD_STATE (see
 * "Misuse"). Not concurrently with other calls on it. */
COLIBRI_API void colibri_sampler_free(colibri_sampler *sampler);

/* Picks a token from logits[0..vocab_size) (not modified). Does not record it: call
 * colibri_sampler_accept with the token actually used. A logit of -inf masks its token.
 * Errors: NON_FINITE (a NaN or +inf logit; the message names its index), INVALID_ARGUMENT
 * (NULL, or every logit -inf); on an error *token is not written. One thread at a time per
 * sampler. */
COLIBRI_API int32_t colibri_sampler_sample(colibri_sampler *sampler, const float *logits, int32_t *token);

/* Records a token (prompt or generated) in the penalty history. Errors: INVALID_ARGUMENT (a
 * token outside the vocabulary). One thread at a time per sampler. */
COLIBRI_API int32_t colibri_sampler_accept(colibri_sampler *sampler, int32_t token);

/* Clears the history and re-seeds. One thread at a time per sampler. */
COLIBRI_API int32_t colibri_sampler_reset(colibri_sampler *sampler);

/* ======================================================================================
 *  Generation: callback form and pull form
 * ====================================================================================== */

typedef struct colibri_generate_options {
  uint32_t struct_size;       /* sizeof(colibri_generate_options), set by the init function */
  uint32_t max_tokens;        /* tokens to generate at most. Default 256 */
  uint32_t sequence;          /* session sequence slot to use; it is reset first. Default 0 */
  uint32_t ignore_eos;        /* 1: keep going past EOS tokens. Default 0 */
  const colibri_sampler_options *sampler; /* NULL (default): sampler defaults */
  const int32_t *eos_tokens;  /* NULL or a count of 0 (default): the model's EOS ids (none:
                                 ignore_eos). Borrowed for the call (stream: until
                                 colibri_stream_open returns) */
  size_t eos_token_count;
  const char *const *stop_strings; /* text that ends generation, excluded from the output.
                                      NUL-terminated UTF-8, borrowed as eos_tokens. Default none */
  size_t stop_string_count;
} colibri_generate_options;

/* Fills *options with the defaults (pass sizeof *options). Thread-safe. */
COLIBRI_API int32_t colibri_generate_options_init(colibri_generate_options *options, size_t struct_size);

typedef struct colibri_generate_result {
  uint32_t struct_size;       /* set by the caller: sizeof(colibri_generate_result) */
  uint32_t finish_reason;     /* COLIBRI_FINISH_* */
  uint64_t prompt_token_count;
  uint64_t generated_token_count; /* sampled tokens, including a final EOS */
  uint64_t prefill_ns;        /* wall time of the prompt's forward passes */
  uint64_t decode_ns;         /* wall time of sampling and decode steps after the prefill */
} colibri_generate_result;

/* Receives one non-empty piece of generated text: piece[0..piece_size) is complete UTF-8 and
 * NUL-terminated, valid only during the call. Return 0 to continue, non-zero to stop
 * (finish reason COLIBRI_FINISH_CANCELLED). Runs on the thread that called generate. It must
 * not use the same session (such a call fails with BAD_STATE saying so); other libcolibri
 * calls are fine, and their errors do not outlive a colibri_generate that returns OK. */
typedef int32_t (*colibri_piece_fn)(void *user, const char *piece, size_t piece_size);

/* Generates from prompt[0..prompt_count) (token ids; see colibri_tokenize and
 * colibri_chat_render): resets options->sequence, prefills the prompt, then samples and feeds
 * back tokens until max_tokens, an EOS id or a stop string, calling on_piece (may be NULL) for
 * each piece of text. result (may be NULL) receives why it ended and counts and times.
 * Cancellation by the callback is not an error: the status is COLIBRI_OK.
 * Errors: INVALID_ARGUMENT (empty prompt, bad option), CONTEXT_FULL (the prompt does not fit,
 * or the context filled up before max_tokens: the text so far was delivered), UNSUPPORTED (no
 * tokenizer), BAD_STATE (a stream is open), NON_FINITE (generation stops: the message names
 * the stage and the position; no token is sampled from non-finite logits), CALLBACK,
 * OUT_OF_MEMORY. One thread at a time per session. */
COLIBRI_API int32_t colibri_generate(colibri_session *session, const int32_t *prompt, size_t prompt_count,
                                     const colibri_generate_options *options, colibri_piece_fn on_piece,
                                     void *user, colibri_generate_result *result);

typedef struct colibri_stream colibri_stream;

/* The pull form of colibri_generate: resets the slot and prefills the prompt now; each
 * colibri_stream_next then produces the next piece. The session is busy until the stream is
 * closed (other calls that run it fail with BAD_STATE). Errors: as colibri_generate.
 * One thread at a time per session; the stream belongs to the session's thread discipline. */
COLIBRI_API int32_t colibri_stream_open(colibri_session *session, const int32_t *prompt, size_t prompt_count,
                                        const colibri_generate_options *options, colibri_stream **stream_out);

/* Produces the next non-empty piece of text: COLIBRI_OK with *piece (NUL-terminated, owned by
 * the stream, valid until the next call on the stream) and *piece_size; or COLIBRI_DONE with
 * an empty piece when generation has ended (then every later call returns COLIBRI_DONE).
 * One call may run several decode steps (while bytes of a character or a possible stop string
 * are held back). Errors: as colibri_generate; BAD_STATE when the session was freed; after an
 * error the stream is finished. One thread at a time (with its session). */
COLIBRI_API int32_t colibri_stream_next(colibri_stream *stream, const char **piece, size_t *piece_size);

/* The stream's progress so far (finish_reason is NONE while running; set result->struct_size
 * first). One thread at a time (with its session). */
COLIBRI_API int32_t colibri_stream_get_result(const colibri_stream *stream, colibri_generate_result *result);

/* Copies the ids generated so far (including a final EOS) into tokens. Buffer rules above.
 * One thread at a time (with its session). */
COLIBRI_API int32_t colibri_stream_tokens(const colibri_stream *stream, int32_t *tokens, size_t capacity,
                                          size_t *count);

/* Ends the stream (stopping early is fine) and frees the session from it. NULL is a no-op; a
 * stream closed twice, or closed while a call runs on its session, is recorded as BAD_STATE
 * and nothing happens (see "Misuse"). One thread at a time (with its session). */
COLIBRI_API void colibri_stream_close(colibri_stream *stream);

/* ======================================================================================
 *  MoE layer API: routing, dispatch and experts of one layer, on caller data
 * ====================================================================================== */

/* Runs layer `layer`'s MoE block (router -> top-k -> experts -> weighted merge, plus the
 * shared expert if the family has one; no norm, no residual) on hidden[row_count, hidden_size]
 * into out[row_count, hidden_size]. route_experts and route_weights ([row_count, top_k] each,
 * row-major) are either both NULL (the model's router decides) or both given (the router is
 * skipped: a static routing table is just data; ids must be < expert_count, weights finite).
 * row_count <= max_batch_tokens. Errors: INVALID_ARGUMENT (dense layer, bad route, NULL),
 * NON_FINITE, CALLBACK, BAD_STATE, IO (the image file changed, as for prefill). One thread at
 * a time per session. */
COLIBRI_API int32_t colibri_session_moe_layer(colibri_session *session, uint32_t layer, const float *hidden,
                                              size_t row_count, const int32_t *route_experts,
                                              const float *route_weights, float *out);

/* Computes one expert of one layer on its gathered rows: rows_out[i] = expert(rows_in[i]) for
 * i < row_count, each row hidden_size floats (the routing weight is applied by the engine
 * afterwards). Return 0 on success; non-zero abandons the forward pass with
 * COLIBRI_ERROR_CALLBACK. Runs on the thread that called into the session, once per active
 * expert, in ascending expert order. It must not use the session it runs in (such a call
 * fails with BAD_STATE saying so). */
typedef int32_t (*colibri_expert_fn)(void *user, uint32_t layer, uint32_t expert, const float *rows_in,
                                     size_t row_count, size_t hidden_size, float *rows_out);

/* Replaces the routed experts' computation in every MoE layer of this session (forward passes
 * and colibri_session_moe_layer) by fn: the engine still routes, groups tokens by expert,
 * gathers their rows and merges the weighted outputs. Shared experts and dense layers stay
 * built in. fn NULL restores the built-in kernels. One thread at a time per session. */
COLIBRI_API int32_t colibri_session_set_expert_fn(colibri_session *session, colibri_expert_fn fn, void *user);

/* ======================================================================================
 *  Statistics
 * ====================================================================================== */

/* Stages of the forward pass timed in colibri_stats.stage_ns. */
#define COLIBRI_STAGE_EMBEDDING 0
#define COLIBRI_STAGE_ATTENTION 1 /* norm, q/k/v, RoPE, KV cache, scores, output projection */
#define COLIBRI_STAGE_ROUTER 2    /* router logits + softmax */
#define COLIBRI_STAGE_TOPK 3
#define COLIBRI_STAGE_DISPATCH 4  /* grouping tokens by expert, gathering rows */
#define COLIBRI_STAGE_EXPERTS 5   /* routed + shared experts, dense FFNs */
#define COLIBRI_STAGE_MERGE 6     /* weighted sum of expert outputs */
#define COLIBRI_STAGE_LM_HEAD 7   /* final norm + output projection */
/* Room in colibri_stats.stage_ns; stage_count says how many are used. */
#define COLIBRI_STATS_MAX_STAGES 16

/* "embedding", "attention", "router", "topk", "dispatch", "experts", "merge", "lm_head", or
 * NULL for a stage this library does not have. Static string. Thread-safe. */
COLIBRI_API const char *colibri_stage_name(uint32_t stage);

typedef struct colibri_stats {
  uint32_t struct_size;       /* set by the caller: sizeof(colibri_stats) */
  uint32_t stage_count;       /* used entries of stage_ns (8 in this version) */
  uint64_t stage_ns[COLIBRI_STATS_MAX_STAGES]; /* time per COLIBRI_STAGE_*, summed */
  uint64_t weight_bytes_read; /* weight bytes streamed by the matmuls */
  uint64_t tokens;            /* batch entries processed */
  uint64_t forward_calls;
  uint64_t non_finite_rows;   /* rows zeroed by COLIBRI_NON_FINITE_ZERO */
  uint64_t expert_activations; /* (token, expert) pairs computed */
} colibri_stats;

/* The session's counters since creation or the last colibri_session_reset_stats.
 * One thread at a time per session. */
COLIBRI_API int32_t colibri_session_get_stats(const colibri_session *session, colibri_stats *stats);

/* Zeroes the session's counters. One thread at a time per session. */
COLIBRI_API int32_t colibri_session_reset_stats(colibri_session *session);


/* ======================================================================================
 *  Serving engine: many concurrent requests on one model (continuous batching)
 * ======================================================================================
 *
 *  An engine owns a paged KV cache (blocks of block_tokens positions, allocated once from
 *  kv_budget_bytes), a thread pool and a scheduler thread. Requests are submitted from any
 *  thread and run together: each scheduler step is one forward pass over one decode token of
 *  every running request plus chunks of the prompts being prefilled (step_tokens in all), so
 *  each active expert's weights are read once per step for every request. New requests join
 *  between steps, finished ones leave at once; prefill is chunked, so a cancellation or an
 *  arrival waits at most one step.
 *
 *  Prefix cache: the KV of full blocks stays cached after a request ends (LRU within the
 *  budget). A request whose prompt begins with a cached token prefix (the next chat turn with
 *  the history, a shared system prompt) prefills only the rest. It never changes results.
 *
 *  Admission: a request waits in a queue until a sequence slot and its prompt's KV blocks are
 *  free; at most max_sequences + queue_capacity requests are accepted and unfinished at once
 *  (beyond that, submit returns COLIBRI_ERROR_BUSY at once; with queue_capacity 0 a request is
 *  accepted only while a slot is free).
 *  When a running request needs a block and none is left, the most recently admitted one
 *  gives its blocks back and is recomputed later (same results).
 *
 *  Determinism: with a fixed seed a request's tokens do not depend on what else runs beside
 *  it, on the thread count, on preemption or on prefix hits: they equal colibri_generate's on
 *  a session with the same options (same kernels).
 *
 *  Threads: colibri_request_submit, colibri_request_submit_chat, colibri_request_cancel,
 *  colibri_request_get_result, colibri_request_tokens, colibri_request_logprobs and
 *  colibri_engine_get_stats may be called from any thread at any time; colibri_request_next by
 *  one thread at a time per request. Request handles outlive their engine: freeing the engine
 *  cancels what is unfinished, and the requests can still be read and must still be freed.
 *  Engine and request handles carry tags like every handle (see "Misuse").
 *
 *  Output is a pull stream only (colibri_request_next), by design: the scheduler thread runs
 *  every request's step, so a callback run there would stall all requests for as long as the
 *  slowest caller's code takes (a blocked socket write, a GC pause) and could call back into
 *  the engine from its own thread; a callback run on a thread per request would cost a thread
 *  each. The scheduler only appends pieces to the request's queue and never waits for a
 *  reader: a caller wanting callbacks runs colibri_request_next on its own thread (the Go and
 *  Rust bindings give a channel and an iterator this way).
 */

typedef struct colibri_engine colibri_engine;
typedef struct colibri_request colibri_request;

typedef struct colibri_engine_options {
  uint32_t struct_size;       /* sizeof(colibri_engine_options), set by the init function */
  uint32_t max_sequences;     /* requests running at once. Default 8. Range 1..4096 */
  uint32_t context_length;    /* tokens per request (prompt + output). 0 (default) =
                                 min(max_position_embeddings, 4096). Range 1..16777216 */
  uint32_t step_tokens;       /* tokens per scheduler step (decode tokens + prefill chunks).
                                 Default 256. Range max_sequences..65536 */
  uint32_t block_tokens;      /* positions per KV block. Default 16. Range 1..4096 */
  uint32_t queue_capacity;    /* requests that may wait beyond the max_sequences running
                                 (then submit is BUSY). Default 64.
                                 Range 0..1048576 */
  uint32_t prefix_cache;      /* 1 (default): reuse cached prefix blocks; 0: off */
  uint32_t reserved0;         /* must be 0 */
  uint64_t kv_budget_bytes;   /* the KV pool (a sliding-window model's window layers first). 0 (default) = max_sequences whole contexts */
  const colibri_session_options *session; /* threads, pin_threads, non_finite_policy,
                                 kv_dtype, force_scalar, seed (the default of requests whose
                                 sampler seed is COLIBRI_SEED_FROM_SESSION), numa_*, max_isa;
                                 its context_length, max_sequences, max_batch_tokens and
                                 max_logit_rows are ignored. NULL (default): the model's */
} colibri_engine_options;

/* Fills *options with the defaults (pass sizeof *options). Thread-safe. */
COLIBRI_API int32_t colibri_engine_options_init(colibri_engine_options *options, size_t struct_size);

/* Creates an engine on `model` (which it keeps alive) and starts its scheduler thread.
 * options may be NULL. Errors: INVALID_ARGUMENT (a field out of range: the message names it;
 * a KV budget below one block), UNSUPPORTED (no tokenizer; a kv_dtype), OUT_OF_MEMORY.
 * Thread-safe. */
COLIBRI_API int32_t colibri_engine_create(colibri_model *model, const colibri_engine_options *options,
                                          colibri_engine **engine_out);

/* Stops the scheduler: unfinished requests end with COLIBRI_FINISH_CANCELLED (their handles
 * stay valid). NULL is a no-op. Not concurrently with other calls on the engine. */
COLIBRI_API void colibri_engine_free(colibri_engine *engine);

#define COLIBRI_ENGINE_BATCH_BUCKETS 9

typedef struct colibri_engine_stats {
  uint32_t struct_size;       /* set by the caller: sizeof(colibri_engine_stats) */
  uint32_t kv_block_tokens;   /* positions per KV block */
  uint64_t queue_depth;       /* requests waiting for admission now */
  uint64_t active_sequences;  /* requests running now */
  uint64_t submitted_count;   /* requests accepted by submit */
  uint64_t rejected_busy_count; /* submits answered COLIBRI_ERROR_BUSY */
  uint64_t finished_count;    /* requests ended (any reason) */
  uint64_t step_count;        /* forward passes */
  uint64_t decode_token_count;  /* tokens computed one per request per step */
  uint64_t prefill_token_count; /* prompt tokens computed (chunks; recomputation included) */
  uint64_t prefix_hit_token_count; /* prompt tokens taken from the prefix cache */
  uint64_t preemption_count;  /* times a request gave its blocks back for recomputation */
  uint64_t max_batch_sequences; /* most requests in one step */
  uint64_t batch_histogram[COLIBRI_ENGINE_BATCH_BUCKETS]; /* steps by requests in the step:
                                 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, 65-128, more */
  uint64_t kv_block_count;    /* blocks in the pool */
  uint64_t kv_blocks_in_use;  /* held by running requests */
  uint64_t kv_blocks_cached;  /* held only by the prefix cache (evictable) */
  uint64_t kv_eviction_count; /* cached blocks reused for new content */
} colibri_engine_stats;

/* The engine's counters (as of the end of the last scheduler step). Thread-safe. */
COLIBRI_API int32_t colibri_engine_get_stats(const colibri_engine *engine, colibri_engine_stats *stats);

typedef struct colibri_request_options {
  uint32_t struct_size;       /* sizeof(colibri_request_options), set by the init function */
  uint32_t max_tokens;        /* tokens to generate at most. Default 256 */
  uint32_t ignore_eos;        /* 1: keep going past EOS tokens. Default 0 */
  uint32_t reserved0;         /* must be 0 */
  const colibri_sampler_options *sampler; /* NULL (default): sampler defaults, the engine's
                                 seed */
  const int32_t *eos_tokens;  /* NULL or a count of 0 (default): the model's EOS ids.
                                 Borrowed for the call */
  size_t eos_token_count;
  const char *const *stop_strings; /* text that ends the output, excluded from it.
                                      NUL-terminated UTF-8, borrowed for the call */
  size_t stop_string_count;
  uint64_t timeout_ns;        /* the request ends (COLIBRI_FINISH_DEADLINE) this long after
                                 submission, waiting or running. 0 (default): no limit */
  uint32_t logprobs;          /* 1: record the log-probability of every sampled token
                                 (colibri_request_logprobs). Default 0. Implied by
                                 top_logprobs > 0 (an appended field, as is top_logprobs: a
                                 struct_size without them means 0) */
  uint32_t top_logprobs;      /* also record the top_logprobs most likely tokens at every
                                 step. Default 0 (none). Range 0..COLIBRI_MAX_TOP_LOGPROBS.
                                 Cost: one pass over the vocabulary per token */
} colibri_request_options;

/* The most alternatives colibri_request_options.top_logprobs may ask for (OpenAI's limit). */
#define COLIBRI_MAX_TOP_LOGPROBS 20

/* A token and its log-probability (natural logarithm, <= 0, finite). This element struct is
 * frozen (it is used in arrays, so it cannot grow). */
typedef struct colibri_token_logprob {
  int32_t token;
  float logprob;
} colibri_token_logprob;

/* Fills *options with the defaults (pass sizeof *options). Thread-safe. */
COLIBRI_API int32_t colibri_request_options_init(colibri_request_options *options, size_t struct_size);

/* Queues a generation from prompt[0..prompt_count) (token ids; see colibri_tokenize and
 * colibri_chat_render) and returns its handle at once; the text comes from
 * colibri_request_next. Errors: BUSY (the queue is full; nothing queued), INVALID_ARGUMENT
 * (empty prompt, a token outside the vocabulary, a bad option, a prompt the KV budget cannot
 * hold), CONTEXT_FULL (the prompt does not fit the context). Thread-safe (not concurrently
 * with colibri_engine_free). */
COLIBRI_API int32_t colibri_request_submit(colibri_engine *engine, const int32_t *prompt, size_t prompt_count,
                                           const colibri_request_options *options, colibri_request **request_out);

/* Queues a chat: messages[0..message_count) rendered with the model's chat template (or
 * chat_options->template_text; chat_options may be NULL) exactly as colibri_chat_render does,
 * and tokenized as its comment says (no COLIBRI_TOKENIZE_ADD_SPECIAL, with
 * COLIBRI_TOKENIZE_PARSE_SPECIAL), then submitted as colibri_request_submit with options.
 * The next turn (history + the reply + a new message) hits the prefix cache.
 * Errors: those of colibri_chat_render (UNSUPPORTED: no usable template or tokenizer;
 * INVALID_ARGUMENT: a NULL role or content, a bad variable, a raise_exception), then those of
 * colibri_request_submit. Thread-safe (not concurrently with colibri_engine_free). */
COLIBRI_API int32_t colibri_request_submit_chat(colibri_engine *engine, const colibri_chat_message *messages,
                                                size_t message_count, const colibri_chat_options *chat_options,
                                                const colibri_request_options *options,
                                                colibri_request **request_out);

/* Waits up to timeout_ns for the next piece of text: COLIBRI_OK with *piece (NUL-terminated,
 * complete UTF-8, owned by the request, valid until the next call on it) and *piece_size;
 * COLIBRI_PENDING when the wait ended first (an empty piece); COLIBRI_DONE when the request
 * has ended and every piece was read (then every later call returns COLIBRI_DONE).
 * timeout_ns < 0 waits as long as it takes; 0 only looks. A request that failed returns its
 * error (NON_FINITE, CONTEXT_FULL: the context filled up before max_tokens, OUT_OF_MEMORY:
 * its tokens outgrew the KV budget) once its pieces are read, then COLIBRI_DONE.
 * One thread at a time per request: a call while another thread's waits gets BAD_STATE
 * ("... is in use by another thread"), and so does colibri_request_free (nothing freed). */
COLIBRI_API int32_t colibri_request_next(colibri_request *request, int64_t timeout_ns, const char **piece,
                                         size_t *piece_size);

/* Ends the request at the next scheduler step, queued, prefilling or decoding (finish reason
 * COLIBRI_FINISH_CANCELLED unless it ended before); the pieces produced so far can still be
 * read. Thread-safe, any time; cancelling twice is fine. */
COLIBRI_API int32_t colibri_request_cancel(colibri_request *request);

typedef struct colibri_request_result {
  uint32_t struct_size;       /* set by the caller: sizeof(colibri_request_result) */
  uint32_t finish_reason;     /* COLIBRI_FINISH_*; NONE while running */
  uint64_t prompt_token_count;
  uint64_t generated_token_count; /* sampled tokens, including a final EOS */
  uint64_t prefix_hit_token_count; /* prompt tokens taken from the prefix cache */
  uint64_t preemption_count;  /* times it gave its KV blocks back and was recomputed */
  uint64_t queue_ns;          /* submission to admission */
  uint64_t time_to_first_token_ns; /* submission to the first sampled token */
  uint64_t decode_ns;         /* the first sampled token to the end */
} colibri_request_result;

/* The request's progress so far (set result->struct_size first). Thread-safe. */
COLIBRI_API int32_t colibri_request_get_result(const colibri_request *request, colibri_request_result *result);

/* Copies the ids generated so far (including a final EOS) into tokens. Buffer rules above.
 * Thread-safe. */
COLIBRI_API int32_t colibri_request_tokens(const colibri_request *request, int32_t *tokens, size_t capacity,
                                           size_t *count);

/* The log-probabilities of generated token token_index (0 = the first; below the count of
 * colibri_request_tokens) of a request submitted with logprobs or top_logprobs. They are the
 * model's raw distribution at that step: log_softmax of the logits row in fp32, before the
 * sampler's penalties, temperature, top-k, top-p and min-p (vLLM's default "raw logprobs";
 * OpenAI's logprobs field). Greedy decoding picks top[0]; recording them changes no token.
 *   chosen  (may be NULL) receives the sampled token and its logprob.
 *   top     receives the top_logprobs most likely tokens, most likely first (equal logprobs:
 *           the lower id first); *count receives how many there are (top_logprobs, or the
 *           vocabulary size if smaller; 0 with logprobs alone). Buffer rules above: top NULL
 *           with capacity 0 is a size query (chosen is still written).
 * Errors: INVALID_ARGUMENT (token_index not generated yet), BAD_STATE (the request was
 * submitted without logprobs), BUFFER_TOO_SMALL. Thread-safe, as colibri_request_tokens. */
COLIBRI_API int32_t colibri_request_logprobs(const colibri_request *request, size_t token_index,
                                             colibri_token_logprob *chosen, colibri_token_logprob *top,
                                             size_t capacity, size_t *count);

/* Cancels the request if it is unfinished and frees the handle. NULL is a no-op. Not
 * concurrently with other calls on the request (while a colibri_request_next runs on it,
 * nothing is freed and BAD_STATE is recorded; see "Misuse"). */
COLIBRI_API void colibri_request_free(colibri_request *request);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* COLIBRI_H */
