// cli/serve.cpp — `colibri serve`: an OpenAI-compatible HTTP server (docs/server.md) on the C
// API's serving engine (continuous batching, prefix cache). HTTP is cpp-httplib's thread-per-
// connection server; each generation request submits to the one engine and streams its pieces
// (Server-Sent Events for "stream": true). A client that goes away cancels its request at the
// next piece or within kPollNs; SIGTERM/SIGINT drain: nothing new is admitted, requests in
// flight finish (or are cancelled after --drain-timeout), then the process exits 0.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "serve_api.h"
#include "serve_metrics.h"

namespace colibri_cli {

namespace {

using nlohmann::json;
using serve::ApiError;
using serve::Endpoint;
using serve::GenerationRequest;

// How long a waiting handler sleeps between looks at its client (a disconnect is noticed within it).
constexpr int64_t kPollNs = 50'000'000;

struct EngineFreer {
  void operator()(colibri_engine *e) const { colibri_engine_free(e); }
};
struct RequestFreer {
  void operator()(colibri_request *r) const { colibri_request_free(r); }
};
using EnginePtr = std::unique_ptr<colibri_engine, EngineFreer>;

struct ServeConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  uint32_t parallel = 8;
  uint32_t context_length = 0;  // 0: the engine's default
  uint64_t kv_budget_bytes = 0;
  uint32_t queue = 64;
  uint32_t step_tokens = 0;     // 0: the engine's default
  std::string api_key;
  uint64_t timeout_ns = 0;
  size_t max_body_bytes = 1u << 20;
  double drain_timeout_s = 30;
  bool log_prompts = false;
  bool quiet = false;
  std::string model_id;
};

// "512M", "2G", "1048576", "64KiB": a byte count (K/M/G/T are powers of 1024).
uint64_t parse_size(const std::string &flag, const std::string &text) {
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == 0 || i > 15) fail_usage(flag + " must be a size such as 512M or 2G, got '" + text + "'");
  uint64_t value = std::stoull(text.substr(0, i));
  std::string unit = text.substr(i);
  for (char &c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = -1;
  if (unit.empty() || unit == "B") shift = 0;
  else if (unit == "K" || unit == "KB" || unit == "KIB") shift = 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB") shift = 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB") shift = 30;
  else if (unit == "T" || unit == "TB" || unit == "TIB") shift = 40;
  if (shift < 0) fail_usage(flag + ": unknown unit '" + text.substr(i) + "' in '" + text + "' (use K, M, G or T)");
  if (value > (UINT64_MAX >> shift)) fail_usage(flag + " is too large: " + text);
  return value << shift;
}

std::string basename_without_extension(const std::string &path) {
  std::string name = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  const std::string ext = ".colibri";
  if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
    name.resize(name.size() - ext.size());
  return name.empty() ? "model" : name;
}

// Equal-time comparison of a presented key with the configured one.
bool same_key(const std::string &a, const std::string &b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0;
}

void send_error(httplib::Response &res, const ApiError &e) {
  res.status = e.status;
  res.set_content(serve::error_body(e).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

ApiError api_error(int status, std::string message, std::string type = "invalid_request_error", std::string code = {},
                   std::string param = {}) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

class Server {
 public:
  Server(ModelPtr model, const ServeConfig &config) : model_(std::move(model)), config_(config) {
    info_ = model_info(model_.get());
    rng_.seed(std::random_device{}());
    created_ = static_cast<int64_t>(std::time(nullptr));
  }

  void create_engine(const colibri_session_options &session_options) {
    colibri_engine_options options;
    check_api(colibri_engine_options_init(&options, sizeof options), "engine options");
    options.max_sequences = config_.parallel;
    options.context_length = config_.context_length;
    options.queue_capacity = config_.queue;
    options.kv_budget_bytes = config_.kv_budget_bytes;
    if (config_.step_tokens) options.step_tokens = config_.step_tokens;
    options.session = &session_options;
    colibri_engine *raw = nullptr;
    check_api(colibri_engine_create(model_.get(), &options, &raw), "engine");
    engine_.reset(raw);
    // The context the engine settled on (0 asked for its default).
    context_length_ = config_.context_length ? config_.context_length
                                             : static_cast<uint32_t>(std::min<uint64_t>(info_.max_position_embeddings, 4096));
    if (context_length_ == 0) context_length_ = 4096;
  }

  uint32_t context_length() const { return context_length_; }

  void install_routes() {
    http_.set_payload_max_length(config_.max_body_bytes);
    http_.set_read_timeout(30, 0);
    http_.set_write_timeout(30, 0);
    http_.set_keep_alive_timeout(2);
    const size_t threads = static_cast<size_t>(config_.parallel) + config_.queue + 8;
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };

    http_.set_pre_routing_handler([this](const httplib::Request &req, httplib::Response &res) {
      if (config_.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
      const std::string auth = req.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      if (auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
          same_key(auth.substr(prefix.size()), config_.api_key))
        return httplib::Server::HandlerResponse::Unhandled;
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(res, api_error(401,
                                auth.empty() ? "this server needs an API key: send the header 'Authorization: Bearer KEY'"
                                             : "the API key is not valid",
                                "authentication_error", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    http_.set_error_handler([this](const httplib::Request &req, httplib::Response &res) {
      if (!res.body.empty() || res.is_chunked_content_provider_) return;
      if (res.status == 413 && req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0)
        send_error(res, api_error(413, "the request body was sent as application/x-www-form-urlencoded, which is limited "
                                       "to 8192 bytes: send JSON with 'Content-Type: application/json' (curl: -H "
                                       "'Content-Type: application/json')"));
      else if (res.status == 413)
        send_error(res, api_error(413, "the request body is larger than the limit of " + std::to_string(config_.max_body_bytes) +
                                           " bytes (colibri serve --max-body-size)"));
      else if (res.status == 404)
        send_error(res, api_error(404, "no such route: " + req.method + " " + req.path +
                                           " (routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, "
                                           "GET /health, GET /metrics)",
                                  "invalid_request_error", "not_found"));
      else
        send_error(res, api_error(res.status, "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path));
    });
    http_.set_exception_handler([](const httplib::Request &, httplib::Response &res, std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception &e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, api_error(500, "internal error: " + what, "server_error"));
    });
    http_.set_logger([this](const httplib::Request &req, const httplib::Response &res) {
      metrics_.record_http(serve::metrics_route(req.path), res.status);
      if (!config_.quiet && req.path != "/metrics" && req.path != "/health")
        log_line(req.remote_addr + " " + req.method + " " + req.path + " " + std::to_string(res.status));
    });

    http_.Get("/health", [this](const httplib::Request &, httplib::Response &res) {
      const bool draining = draining_.load();
      res.status = draining ? 503 : 200;
      res.set_content(draining ? R"({"status":"draining"})" : R"({"status":"ok"})", "application/json");
    });
    http_.Get("/v1/models", [this](const httplib::Request &, httplib::Response &res) {
      res.set_content(dump(json{{"object", "list"}, {"data", json::array({model_json()})}}), "application/json");
    });
    http_.Get(R"(/v1/models/(.+))", [this](const httplib::Request &req, httplib::Response &res) {
      if (req.matches[1] != config_.model_id) {
        send_error(res, api_error(404, "no model '" + std::string(req.matches[1]) + "': this server serves '" +
                                           config_.model_id + "'",
                                  "invalid_request_error", "model_not_found", "model"));
        return;
      }
      res.set_content(dump(model_json()), "application/json");
    });
    http_.Get("/metrics", [this](const httplib::Request &, httplib::Response &res) {
      colibri_engine_stats stats{};
      stats.struct_size = sizeof stats;
      colibri_engine_get_stats(engine_.get(), &stats);
      serve::ServerGauges gauges;
      gauges.requests_in_flight = static_cast<uint64_t>(in_flight_.load());
      gauges.draining = draining_.load();
      res.set_content(metrics_.render(stats, gauges), "text/plain; version=0.0.4; charset=utf-8");
    });
    http_.Post("/v1/completions", [this](const httplib::Request &req, httplib::Response &res) {
      generate(req, res, Endpoint::Completions);
    });
    http_.Post("/v1/chat/completions", [this](const httplib::Request &req, httplib::Response &res) {
      generate(req, res, Endpoint::ChatCompletions);
    });
  }

  int bind() {
    if (config_.port == 0) return http_.bind_to_any_port(config_.host);
    return http_.bind_to_port(config_.host, config_.port) ? config_.port : -1;
  }
  bool listen() { return http_.listen_after_bind(); }

  // SIGTERM: stop admitting; wait for the requests in flight up to the drain timeout, then
  // cancel what is left; stop the listener. A second signal cancels at once.
  void drain(const sigset_t &signals) {
    draining_ = true;
    log_line("draining: " + std::to_string(in_flight_.load()) + " request(s) in flight, admitting nothing new (" +
             std::to_string(static_cast<int>(config_.drain_timeout_s)) + " s, a second signal cancels them)");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(config_.drain_timeout_s);
    bool cancelled = false;
    for (;;) {
      if (in_flight_.load() == 0) break;
      if (!cancelled && std::chrono::steady_clock::now() >= deadline) {
        cancel_all();
        cancelled = true;
      }
      timespec wait{0, 50'000'000};
      if (sigtimedwait(&signals, nullptr, &wait) > 0 && !cancelled) {
        cancel_all();
        cancelled = true;
      }
      if (cancelled && std::chrono::steady_clock::now() >= deadline + std::chrono::seconds(10)) break;
    }
    http_.stop();
  }

  void stop() { http_.stop(); }
  void log_line(const std::string &line) {
    if (config_.quiet) return;
    std::lock_guard<std::mutex> lock(log_mutex_);
    std::fprintf(stderr, "colibri serve: %s\n", line.c_str());
    std::fflush(stderr);
  }

 private:
  // What a generation handler and its response writer share.
  struct Generation {
    Server *server = nullptr;
    GenerationRequest request;
    std::unique_ptr<colibri_request, RequestFreer> handle;
    std::vector<int32_t> prompt;
    std::string echo_text;
    std::string id;
    uint64_t seed = 0;
    uint64_t start_ns = 0;
    std::string remote;
    bool registered = false;
    size_t logprob_tokens = 0;  // generated tokens whose logprobs were sent
    size_t text_offset = 0;     // completions' text_offset of the next token
  };

  json model_json() const {
    return json{{"id", config_.model_id}, {"object", "model"}, {"created", created_}, {"owned_by", "colibri"},
                {"meta",
                 {{"architecture", info_.architecture}, {"vocab_size", info_.vocab_size}, {"context_length", context_length_}}}};
  }

  uint64_t next_seed() {
    std::lock_guard<std::mutex> lock(rng_mutex_);
    return rng_() & static_cast<uint64_t>(INT64_MAX);
  }

  void cancel_all() {
    std::lock_guard<std::mutex> lock(live_mutex_);
    for (colibri_request *r : live_) colibri_request_cancel(r);
    if (!live_.empty()) log_line("cancelled " + std::to_string(live_.size()) + " request(s) still running");
  }

  std::vector<int32_t> prompt_tokens(const GenerationRequest &r, std::string *echo_text) {
    try {
      if (r.endpoint == Endpoint::ChatCompletions) {
        if (!info_.has_chat_template)
          throw api_error(400, "model '" + config_.model_id + "' has no chat template: use POST /v1/completions",
                          "invalid_request_error", "unsupported", "messages");
        std::vector<std::pair<std::string, std::string>> history;
        for (const auto &m : r.messages) history.emplace_back(m.role, m.content);
        return tokenize(model_.get(), render_chat(model_.get(), history), COLIBRI_TOKENIZE_PARSE_SPECIAL);
      }
      if (r.prompt_is_tokens) {
        if (r.echo) *echo_text = detokenize(model_.get(), r.prompt_tokens, 0);
        return r.prompt_tokens;
      }
      if (r.echo) *echo_text = r.prompt_text;
      return tokenize(model_.get(), r.prompt_text, COLIBRI_TOKENIZE_ADD_SPECIAL);
    } catch (const Failure &f) {
      throw api_error(400, f.message, "invalid_request_error", {}, r.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt");
    }
  }

  void generate(const httplib::Request &req, httplib::Response &res, Endpoint endpoint) {
    auto g = std::make_shared<Generation>();
    g->server = this;
    g->start_ns = now_ns();
    g->remote = req.remote_addr;
    try {
      if (draining_) throw api_error(503, "the server is shutting down", "server_error", "draining");
      serve::RequestLimits limits;
      limits.vocab_size = static_cast<int64_t>(info_.vocab_size);
      g->request = serve::parse_request(req.body, endpoint, limits);
      const GenerationRequest &r = g->request;
      g->prompt = prompt_tokens(r, &g->echo_text);
      const std::string prompt_param = endpoint == Endpoint::Completions ? "prompt" : "messages";
      if (g->prompt.empty()) throw api_error(400, "the prompt is empty", "invalid_request_error", {}, prompt_param);
      if (g->prompt.size() >= context_length_)
        throw api_error(400,
                        "the prompt has " + std::to_string(g->prompt.size()) + " tokens but the context holds " +
                            std::to_string(context_length_) + " (one more is needed to generate): shorten it, or start the "
                            "server with a larger --ctx",
                        "invalid_request_error", "context_length_exceeded", prompt_param);
      const uint32_t room = context_length_ - static_cast<uint32_t>(g->prompt.size());
      if (r.max_tokens && *r.max_tokens > room)
        throw api_error(400,
                        "the context holds " + std::to_string(context_length_) + " tokens; the prompt has " +
                            std::to_string(g->prompt.size()) + " and max_tokens asks for " + std::to_string(*r.max_tokens) +
                            " more (at most " + std::to_string(room) + ")",
                        "invalid_request_error", "context_length_exceeded", "max_tokens");
      submit(*g, r.max_tokens.value_or(room));
    } catch (const ApiError &e) {
      if (e.status == 429) res.set_header("Retry-After", "1");
      send_error(res, e);
      return;
    } catch (const Failure &f) {
      send_error(res, api_error(500, f.message, "server_error"));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(live_mutex_);
      live_.insert(g->handle.get());
      g->registered = true;
    }
    ++in_flight_;
    const bool stream = g->request.stream;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        stream ? "text/event-stream" : "application/json",
        [g](size_t, httplib::DataSink &sink) { return g->server->write_response(*g, sink); },
        [g](bool) { g->server->finish(*g); });
  }

  void submit(Generation &g, uint32_t max_tokens) {
    const GenerationRequest &r = g.request;
    colibri_sampler_options sampler;
    check_api(colibri_sampler_options_init(&sampler, sizeof sampler), "sampler options");
    sampler.temperature = r.temperature;
    sampler.top_p = r.top_p;
    sampler.top_k = r.top_k;
    sampler.min_p = r.min_p;
    sampler.presence_penalty = r.presence_penalty;
    sampler.frequency_penalty = r.frequency_penalty;
    sampler.repetition_penalty = r.repetition_penalty;
    // OpenAI's penalties count every token generated so far (the whole context here).
    sampler.penalty_last_n = std::min<uint32_t>(context_length_, 1048576);
    g.seed = r.seed.value_or(next_seed());
    sampler.seed = g.seed;
    std::vector<const char *> stops;
    for (const std::string &s : r.stop) stops.push_back(s.c_str());
    colibri_request_options options;
    check_api(colibri_request_options_init(&options, sizeof options), "request options");
    options.max_tokens = max_tokens;
    options.ignore_eos = r.ignore_eos ? 1 : 0;
    options.sampler = &sampler;
    options.stop_strings = stops.empty() ? nullptr : stops.data();
    options.stop_string_count = stops.size();
    options.timeout_ns = config_.timeout_ns;
    options.logprobs = r.logprobs ? 1 : 0;
    options.top_logprobs = r.top_logprobs;
    colibri_request *raw = nullptr;
    const int32_t status = colibri_request_submit(engine_.get(), g.prompt.data(), g.prompt.size(), &options, &raw);
    if (status == COLIBRI_ERROR_BUSY)
      throw api_error(429,
                      "the server is busy: " + std::to_string(config_.queue) +
                          " requests are already waiting (colibri serve --queue); retry later",
                      "rate_limit_error", "busy");
    if (status == COLIBRI_ERROR_CONTEXT_FULL || status == COLIBRI_ERROR_INVALID_ARGUMENT)
      throw api_error(400, last_api_error(status), "invalid_request_error",
                      status == COLIBRI_ERROR_CONTEXT_FULL ? "context_length_exceeded" : "");
    if (status < 0) throw api_error(500, "submitting the request failed: " + last_api_error(status), "server_error");
    g.handle.reset(raw);
    g.id = serve::response_id(r.endpoint, serial_.fetch_add(1), next_seed());
  }

  json usage_json(const colibri_request_result &result) const {
    return json{{"prompt_tokens", result.prompt_token_count},
                {"completion_tokens", result.generated_token_count},
                {"total_tokens", result.prompt_token_count + result.generated_token_count}};
  }

  json chunk_json(const Generation &g, const std::string &text, const char *finish, bool first,
                  json logprobs = nullptr) const {
    json choice = {{"index", 0}, {"finish_reason", finish ? json(finish) : json(nullptr)}, {"logprobs", std::move(logprobs)}};
    const bool chat = g.request.endpoint == Endpoint::ChatCompletions;
    if (chat) {
      json delta = json::object();
      if (first) delta["role"] = "assistant";
      if (!text.empty() || (first && !finish)) delta["content"] = text;
      choice["delta"] = std::move(delta);
    } else {
      choice["text"] = text;
    }
    return json{{"id", g.id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", static_cast<int64_t>(std::time(nullptr))},
                {"model", config_.model_id},
                {"choices", json::array({std::move(choice)})}};
  }

  // The text of one token as the client sees it (U+FFFD for the bytes of an incomplete UTF-8
  // sequence: a token may hold part of a character).
  std::string token_piece(int32_t token) const {
    try {
      return detokenize(model_.get(), {token}, 0);
    } catch (const Failure &) {
      return {};
    }
  }

  static json bytes_of(const std::string &text) {
    json bytes = json::array();
    for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
    return bytes;
  }

  // The logprobs of generated tokens [g.logprob_tokens, end) in the endpoint's shape (OpenAI:
  // completions {tokens, token_logprobs, top_logprobs, text_offset}, chat {content: [...]}), or
  // null when the request did not ask for them or there are none.
  json take_logprobs(Generation &g, size_t end) {
    if (!g.request.logprobs || end <= g.logprob_tokens) return nullptr;
    const bool chat = g.request.endpoint == Endpoint::ChatCompletions;
    std::vector<int32_t> ids(end);
    size_t count = 0;
    if (colibri_request_tokens(g.handle.get(), ids.data(), ids.size(), &count) != COLIBRI_OK && count < end) return nullptr;
    json tokens = json::array(), token_logprobs = json::array(), top_list = json::array(), offsets = json::array(),
         content = json::array();
    std::vector<colibri_token_logprob> top(g.request.top_logprobs);
    for (size_t i = g.logprob_tokens; i < end; ++i) {
      colibri_token_logprob chosen{};
      size_t n = 0;
      if (colibri_request_logprobs(g.handle.get(), i, &chosen, top.empty() ? nullptr : top.data(), top.size(), &n) != COLIBRI_OK)
        break;
      const std::string text = token_piece(chosen.token);
      if (chat) {
        json alternatives = json::array();
        for (size_t k = 0; k < n; ++k) {
          const std::string t = token_piece(top[k].token);
          alternatives.push_back({{"token", t}, {"logprob", top[k].logprob}, {"bytes", bytes_of(t)}});
        }
        content.push_back(
            {{"token", text}, {"logprob", chosen.logprob}, {"bytes", bytes_of(text)}, {"top_logprobs", std::move(alternatives)}});
      } else {
        tokens.push_back(text);
        token_logprobs.push_back(chosen.logprob);
        json alternatives = json::object();
        for (size_t k = 0; k < n; ++k) alternatives[token_piece(top[k].token)] = top[k].logprob;
        top_list.push_back(std::move(alternatives));
        offsets.push_back(g.text_offset);
        g.text_offset += text.size();
      }
      g.logprob_tokens = i + 1;
    }
    if (chat) return json{{"content", std::move(content)}};
    return json{{"tokens", std::move(tokens)},
                {"token_logprobs", std::move(token_logprobs)},
                {"top_logprobs", std::move(top_list)},
                {"text_offset", std::move(offsets)}};
  }

  // Generated tokens so far, less a final EOS that ended the request (it has no text).
  size_t tokens_with_text(const Generation &g, bool finished, uint32_t finish_reason) const {
    size_t count = 0;
    colibri_request_tokens(g.handle.get(), nullptr, 0, &count);
    if (finished && finish_reason == COLIBRI_FINISH_EOS && count > 0) --count;
    return count;
  }

  static bool write_event(httplib::DataSink &sink, const std::string &data) {
    const std::string event = "data: " + data + "\n\n";
    return sink.write(event.data(), event.size());
  }

  // Runs on the HTTP worker thread that answers the request: pulls pieces from the engine and
  // writes them (as events when streaming, else as one body at the end). Returns false (the
  // connection closes) when the client went away; the request is then cancelled.
  bool write_response(Generation &g, httplib::DataSink &sink) {
    const bool stream = g.request.stream;
    std::string text = g.echo_text;
    g.text_offset = g.echo_text.size();
    bool first = true;
    int32_t failure = COLIBRI_OK;
    std::string failure_message;
    if (stream && !g.echo_text.empty()) {
      if (!write_event(sink, dump(chunk_json(g, g.echo_text, nullptr, first)))) return client_gone(g);
      first = false;
    }
    for (;;) {
      const char *piece = nullptr;
      size_t size = 0;
      const int32_t status = colibri_request_next(g.handle.get(), kPollNs, &piece, &size);
      if (status == COLIBRI_DONE) break;
      if (status == COLIBRI_PENDING) {
        if (!sink.is_writable()) return client_gone(g);
        continue;
      }
      if (status < 0) {
        failure = status;
        failure_message = last_api_error(status);
        continue;  // the next call returns DONE
      }
      if (stream) {
        const std::string piece_text(piece, size);
        json logprobs = g.request.logprobs ? take_logprobs(g, tokens_with_text(g, false, 0)) : json(nullptr);
        if (!write_event(sink, dump(chunk_json(g, piece_text, nullptr, first, std::move(logprobs))))) return client_gone(g);
        first = false;
      } else {
        text.append(piece, size);
      }
    }
    colibri_request_result result{};
    result.struct_size = sizeof result;
    colibri_request_get_result(g.handle.get(), &result);
    if (failure != COLIBRI_OK) {
      // The status line (200) is out already: the error goes in the body (as OpenAI streams do).
      const ApiError e = api_error(500, "the generation failed after it started: " + failure_message, "server_error",
                                   failure == COLIBRI_ERROR_NON_FINITE ? "non_finite" : "");
      if (stream) {
        write_event(sink, dump(serve::error_body(e)));
        write_event(sink, "[DONE]");
      } else {
        const std::string body = dump(serve::error_body(e));
        sink.write(body.data(), body.size());
      }
      sink.done();
      return true;
    }
    const char *finish = serve::finish_reason_name(result.finish_reason);
    json logprobs = take_logprobs(g, tokens_with_text(g, true, result.finish_reason));
    if (stream) {
      if (!write_event(sink, dump(chunk_json(g, "", finish, first, std::move(logprobs))))) return client_gone(g);
      if (g.request.include_usage) {
        json usage = chunk_json(g, "", nullptr, false);
        usage["choices"] = json::array();
        usage["usage"] = usage_json(result);
        if (!write_event(sink, dump(usage))) return client_gone(g);
      }
      if (!write_event(sink, "[DONE]")) return client_gone(g);
    } else {
      json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", std::move(logprobs)}};
      const bool chat = g.request.endpoint == Endpoint::ChatCompletions;
      if (chat) choice["message"] = json{{"role", "assistant"}, {"content", text}};
      else choice["text"] = text;
      const json body = {{"id", g.id},
                         {"object", chat ? "chat.completion" : "text_completion"},
                         {"created", static_cast<int64_t>(std::time(nullptr))},
                         {"model", config_.model_id},
                         {"choices", json::array({std::move(choice)})},
                         {"usage", usage_json(result)}};
      const std::string out = dump(body);
      if (!sink.write(out.data(), out.size())) return client_gone(g);
    }
    sink.done();
    return true;
  }

  bool client_gone(Generation &g) {
    colibri_request_cancel(g.handle.get());
    return false;
  }

  // The response is over (written, failed or abandoned): record it and free the request.
  void finish(Generation &g) {
    if (!g.registered) return;
    colibri_request_cancel(g.handle.get());  // a no-op when it ended
    colibri_request_result result{};
    result.struct_size = sizeof result;
    // Wait (bounded) for the cancellation to land so the record has the final figures.
    for (int i = 0; i < 200; ++i) {
      colibri_request_get_result(g.handle.get(), &result);
      if (result.finish_reason != COLIBRI_FINISH_NONE) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    serve::GenerationRecord record;
    record.prompt_tokens = result.prompt_token_count;
    record.generated_tokens = result.generated_token_count;
    record.finish_reason = result.finish_reason;
    record.duration_s = seconds_since(g.start_ns);
    if (result.generated_token_count > 0) record.time_to_first_token_s = static_cast<double>(result.time_to_first_token_ns) / 1e9;
    if (result.generated_token_count > 1)
      record.time_per_output_token_s =
          static_cast<double>(result.decode_ns) / 1e9 / static_cast<double>(result.generated_token_count - 1);
    metrics_.record_generation(record);
    if (!config_.quiet) {
      char line[512];
      std::snprintf(line, sizeof line,
                    "%s %s prompt %llu tokens (prefix hit %llu), generated %llu, ttft %.3f s, total %.3f s, finish %s, seed %llu",
                    g.remote.c_str(), g.id.c_str(), static_cast<unsigned long long>(result.prompt_token_count),
                    static_cast<unsigned long long>(result.prefix_hit_token_count),
                    static_cast<unsigned long long>(result.generated_token_count),
                    static_cast<double>(result.time_to_first_token_ns) / 1e9, record.duration_s,
                    serve::finish_reason_name(result.finish_reason), static_cast<unsigned long long>(g.seed));
      std::string text = line;
      if (!g.request.user.empty()) text += ", user " + dump(json(g.request.user));
      if (config_.log_prompts) {
        text += ", prompt " + dump(g.request.endpoint == Endpoint::Completions ? json(g.request.prompt_text)
                                                                                : json(g.request.messages.size()));
        if (g.request.endpoint == Endpoint::ChatCompletions) {
          json messages = json::array();
          for (const auto &m : g.request.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
          text += " " + dump(messages);
        }
      }
      log_line(text);
    }
    {
      std::lock_guard<std::mutex> lock(live_mutex_);
      live_.erase(g.handle.get());
    }
    g.handle.reset();
    g.registered = false;
    --in_flight_;
  }

  ModelPtr model_;
  ServeConfig config_;
  colibri_model_info info_{};
  EnginePtr engine_;
  uint32_t context_length_ = 0;
  httplib::Server http_;
  serve::Metrics metrics_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> serial_{0};
  std::mutex live_mutex_;
  std::set<colibri_request *> live_;
  std::mutex rng_mutex_;
  std::mt19937_64 rng_;
  std::mutex log_mutex_;
  int64_t created_ = 0;
};

}  // namespace

int serve_command(int argc, char **argv) {
  cxxopts::Options options("colibri serve", "OpenAI-compatible HTTP server (docs/server.md)");
  add_model_flags(options, FlagSet::Full);
  options.add_options("Server")
      ("host", "address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)",
       cxxopts::value<std::string>()->default_value("127.0.0.1"))
      ("port", "TCP port (0: any free port, printed at start)", cxxopts::value<std::string>()->default_value("8080"))
      ("parallel", "requests generated at once (engine sequences)", cxxopts::value<std::string>()->default_value("8"))
      ("ctx", "tokens per request, prompt + output (default: the model's, at most 4096)", cxxopts::value<std::string>())
      ("kv-budget", "KV cache memory, e.g. 512M or 2G (default: --parallel whole contexts)", cxxopts::value<std::string>())
      ("queue", "requests that may wait for a slot; beyond it the answer is 429", cxxopts::value<std::string>()->default_value("64"))
      ("step-tokens", "tokens per scheduler step (decode tokens + prefill chunks; default the engine's)",
       cxxopts::value<std::string>())
      ("api-key", "require 'Authorization: Bearer KEY' (all routes but /health)", cxxopts::value<std::string>())
      ("api-key-file", "read the key from a file (keeps it out of the process list)", cxxopts::value<std::string>())
      ("timeout", "seconds a request may take, waiting included (0: no limit)", cxxopts::value<std::string>()->default_value("600"))
      ("max-body-size", "largest request body (413 beyond it), e.g. 1M", cxxopts::value<std::string>()->default_value("1M"))
      ("drain-timeout", "seconds SIGTERM waits for requests in flight before cancelling them",
       cxxopts::value<std::string>()->default_value("30"))
      ("alias", "the model id clients see (default: the image's file name)", cxxopts::value<std::string>())
      ("log-prompts", "write prompt text into the request log (off: only sizes and timings)")
      ("quiet", "no request log");
  bool help = false;
  cxxopts::ParseResult flags = parse_flags(options, argc, argv, &help);
  if (help) return kExitOk;
  const ModelFlags model_flags = read_model_flags(flags, FlagSet::Full);

  ServeConfig config;
  config.host = flags["host"].as<std::string>();
  config.port = static_cast<int>(parse_integer("--port", flags["port"].as<std::string>(), 0, 65535));
  config.parallel = static_cast<uint32_t>(parse_integer("--parallel", flags["parallel"].as<std::string>(), 1, 4096));
  if (flags.count("ctx"))
    config.context_length = static_cast<uint32_t>(parse_integer("--ctx", flags["ctx"].as<std::string>(), 1, 16777216));
  if (flags.count("kv-budget")) config.kv_budget_bytes = parse_size("--kv-budget", flags["kv-budget"].as<std::string>());
  config.queue = static_cast<uint32_t>(parse_integer("--queue", flags["queue"].as<std::string>(), 0, 1048576));
  if (flags.count("step-tokens"))
    config.step_tokens = static_cast<uint32_t>(parse_integer("--step-tokens", flags["step-tokens"].as<std::string>(), 1, 65536));
  config.timeout_ns = static_cast<uint64_t>(parse_real("--timeout", flags["timeout"].as<std::string>(), 0, 1e7) * 1e9);
  config.max_body_bytes = static_cast<size_t>(parse_size("--max-body-size", flags["max-body-size"].as<std::string>()));
  if (config.max_body_bytes < 1024) fail_usage("--max-body-size must be at least 1K");
  config.drain_timeout_s = parse_real("--drain-timeout", flags["drain-timeout"].as<std::string>(), 0, 86400);
  config.log_prompts = flags.count("log-prompts") > 0;
  config.quiet = flags.count("quiet") > 0;
  if (flags.count("api-key") && flags.count("api-key-file")) fail_usage("give --api-key or --api-key-file, not both");
  if (flags.count("api-key")) config.api_key = flags["api-key"].as<std::string>();
  if (flags.count("api-key-file")) {
    config.api_key = read_text_file("--api-key-file", flags["api-key-file"].as<std::string>());
    while (!config.api_key.empty() && std::isspace(static_cast<unsigned char>(config.api_key.back()))) config.api_key.pop_back();
  }
  if ((flags.count("api-key") || flags.count("api-key-file")) && config.api_key.empty())
    fail_usage("the API key is empty");

  // SIGTERM and SIGINT are taken by sigwait below: blocked before any thread starts, so that
  // every thread (the engine's, HTTP's) inherits the mask. SIGPIPE: a client that closed its
  // socket is a write error, not the end of the server.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  ModelPtr model = open_model(model_flags);
  const colibri_model_info info = model_info(model.get());
  if (!info.has_tokenizer) fail_runtime(resolve_model_path(model_flags) + ": the image has no usable tokenizer; `colibri serve` needs one");
  config.model_id = flags.count("alias") ? flags["alias"].as<std::string>() : basename_without_extension(resolve_model_path(model_flags));

  colibri_session_options session_options;
  check_api(colibri_session_options_init(&session_options, sizeof session_options), "session options");
  session_options.threads = model_flags.threads;
  apply_session_flags(model_flags, &session_options);  // --isa, --device
  session_options.numa_policy = model_flags.numa_policy;
  session_options.numa_node = model_flags.numa_node;

  Server server(std::move(model), config);
  server.create_engine(session_options);
  server.install_routes();
  const int port = server.bind();
  if (port < 0)
    fail_io("cannot listen on " + config.host + ":" + std::to_string(config.port) +
            " (in use, or not an address of this machine); pick another with --port, or --port 0 for any free one");
  // Always printed (also under --quiet): tests and scripts read the port from it.
  std::fprintf(stderr, "colibri serve: listening on http://%s:%d (model %s, parallel %u, context %u, queue %u%s)\n",
               config.host.c_str(), port, config.model_id.c_str(), config.parallel, server.context_length(), config.queue,
               config.api_key.empty() ? "" : ", API key required");
  std::fflush(stderr);

  std::atomic<bool> listening_done{false};
  std::thread watcher([&] {
    for (;;) {
      int signal_number = 0;
      if (sigwait(&signals, &signal_number) != 0) continue;
      if (listening_done) return;  // woken by the main thread: the listener ended on its own
      server.drain(signals);
      return;
    }
  });
  const bool ok = server.listen();
  listening_done = true;
  pthread_kill(watcher.native_handle(), SIGTERM);
  watcher.join();
  if (!ok) fail_io("the HTTP listener stopped with an error");
  server.log_line("stopped");
  return kExitOk;
}

}  // namespace colibri_cli
