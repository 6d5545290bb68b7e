package colibri

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

func newEngine(t *testing.T, m *Model, opts EngineOptions) *Engine {
	t.Helper()
	if opts.ContextLength == 0 {
		opts.ContextLength = 64
	}
	if opts.StepTokens == 0 {
		opts.StepTokens = 16
	}
	opts.Session.Threads = 2
	e, err := m.NewEngine(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func collect(t *testing.T, ctx context.Context, r *Request) (string, error) {
	t.Helper()
	text := ""
	for p := range r.Pieces(ctx) {
		if p.Err != nil {
			return text, p.Err
		}
		text += p.Text
	}
	return text, nil
}

// Concurrent requests from many goroutines: each equals a lone session's generation with the
// same seed (greedy equals the oracle), whatever the engine batched it with.
func TestEngineConcurrentRequestsEqualSessions(t *testing.T) {
	m := openModel(t)
	e := newEngine(t, m, EngineOptions{MaxSequences: 4})
	s := newSession(t, m)
	const n = 8
	type want struct {
		tokens []int32
		text   string
	}
	opts := make([]RequestOptions, n)
	wants := make([]want, n)
	for i := range opts {
		sampler := DefaultSamplerOptions()
		sampler.Seed = uint64(40 + i)
		if i == 0 {
			sampler = GreedySampler()
		}
		opts[i] = RequestOptions{MaxTokens: 6 + i, IgnoreEOS: true, Sampler: &sampler}
		if i == 0 {
			opts[i].MaxTokens = len(fixture.oracle.Greedy)
		}
		tokens, text := streamAll(t, s, fixture.oracle.InputIDs, GenerateOptions{MaxTokens: opts[i].MaxTokens,
			IgnoreEOS: true, Sampler: &sampler})
		wants[i] = want{tokens, text}
	}
	if !equalTokens(wants[0].tokens, fixture.oracle.Greedy) {
		t.Fatalf("greedy session: %v, oracle %v", wants[0].tokens, fixture.oracle.Greedy)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := e.SubmitTokens(fixture.oracle.InputIDs, opts[i])
			if err != nil {
				errs <- err
				return
			}
			defer r.Close()
			text, err := collect(t, context.Background(), r)
			if err != nil {
				errs <- err
				return
			}
			tokens, err := r.Tokens()
			if err != nil {
				errs <- err
				return
			}
			res, _ := r.Result()
			if text != wants[i].text || !equalTokens(tokens, wants[i].tokens) || res.FinishReason != FinishLength ||
				res.GeneratedTokens != len(tokens) {
				errs <- fmt.Errorf("request %d differs from its lone generation: %q %v", i, text, tokens)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Submitted != n || st.MaxBatchSequences < 2 || st.MaxBatchSequences > 4 || st.KVBlockTokens != 16 {
		t.Fatalf("stats: %+v", st)
	}
}

// Context cancellation cancels the request; Busy, timeouts, the prefix cache; requests
// outlive the engine.
func TestEngineCancelBusyTimeoutPrefix(t *testing.T) {
	m := openModel(t)
	// One slot, and a context long enough that a (the slot holder) runs for many milliseconds:
	// b's cancellation lands while b still waits, even on a loaded machine.
	e := newEngine(t, m, EngineOptions{MaxSequences: 1, QueueCapacity: 1, ContextLength: 1024})
	long := RequestOptions{MaxTokens: 900, IgnoreEOS: true}
	a, err := e.SubmitTokens(fixture.oracle.InputIDs, long)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// One slot and a queue of one: a and b are accepted, the third (submitted before a can
	// have finished its 40 tokens) is refused.
	b, err := e.SubmitTokens(fixture.oracle.InputIDs, long) // waits for the slot
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := e.SubmitTokens(fixture.oracle.InputIDs, long); !errors.Is(err, StatusBusy) {
		t.Fatalf("third submit: %v, want busy", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := collect(t, ctx, b); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	if _, err := collect(t, context.Background(), b); err != nil {
		t.Fatal(err)
	}
	// b may have had the slot for a few tokens (if a finished first on a loaded machine); it
	// must end cancelled, short of its limit.
	if res, _ := b.Result(); res.FinishReason != FinishCancelled || res.GeneratedTokens >= long.MaxTokens {
		t.Fatalf("b: %+v", res)
	}
	if _, err := collect(t, context.Background(), a); err != nil {
		t.Fatal(err)
	}
	first, _ := a.Tokens()
	// Second turn: history = prompt + output; the first turn's full blocks are reused.
	history := append(append([]int32{}, fixture.oracle.InputIDs...), first[:20]...)
	c, err := e.SubmitTokens(history, RequestOptions{MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	collect(t, context.Background(), c)
	if res, _ := c.Result(); res.PrefixHitTokens < 16 || res.PrefixHitTokens%16 != 0 {
		t.Fatalf("second turn: %+v", res)
	}
	// A timeout ends the request with FinishDeadline.
	d, err := e.SubmitTokens(fixture.oracle.InputIDs, RequestOptions{MaxTokens: 1000, IgnoreEOS: true, Timeout: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	collect(t, context.Background(), d)
	if res, _ := d.Result(); res.FinishReason != FinishDeadline {
		t.Fatalf("timeout: %+v", res)
	}
	// A request still running when the engine closes ends cancelled and stays readable.
	f, err := e.SubmitTokens(fixture.oracle.InputIDs, RequestOptions{MaxTokens: 40, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if _, err := collect(t, context.Background(), f); err != nil {
		t.Fatal(err)
	}
	if res, _ := f.Result(); res.FinishReason != FinishCancelled && res.FinishReason != FinishLength {
		t.Fatalf("after engine close: %+v", res)
	}
	f.Close()
	if _, err := f.Result(); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed request: %v", err)
	}
	if _, err := e.SubmitTokens(fixture.oracle.InputIDs, long); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed engine: %v", err)
	}
}

// Logprobs: greedy picks the most likely token of each step, the values are log_softmax of
// the raw logits (a session's, on the same tokens), and recording them changes no token.
func TestEngineLogprobs(t *testing.T) {
	m := openModel(t)
	e := newEngine(t, m, EngineOptions{MaxSequences: 3})
	prompt := fixture.oracle.InputIDs
	greedy := GreedySampler()
	sampled := DefaultSamplerOptions()
	sampled.Seed = 9
	sampled.PresencePenalty = 1
	ctx := context.Background()
	g, err := e.SubmitTokens(prompt, RequestOptions{MaxTokens: 6, IgnoreEOS: true, Sampler: &greedy, TopLogprobs: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	with, err := e.SubmitTokens(prompt, RequestOptions{MaxTokens: 10, IgnoreEOS: true, Sampler: &sampled, Logprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer with.Close()
	without, err := e.SubmitTokens(prompt, RequestOptions{MaxTokens: 10, IgnoreEOS: true, Sampler: &sampled})
	if err != nil {
		t.Fatal(err)
	}
	defer without.Close()
	for _, r := range []*Request{g, with, without} {
		if _, err := collect(t, ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	gTokens, _ := g.Tokens()
	withTokens, _ := with.Tokens()
	withoutTokens, _ := without.Tokens()
	if fmt.Sprint(withTokens) != fmt.Sprint(withoutTokens) {
		t.Fatalf("logprobs changed the tokens: %v vs %v", withTokens, withoutTokens)
	}
	if fmt.Sprint(gTokens) != fmt.Sprint(fixture.oracle.Greedy[:6]) {
		t.Fatalf("greedy tokens %v, want %v", gTokens, fixture.oracle.Greedy[:6])
	}
	s := newSession(t, m)
	if err := s.Prefill(0, prompt); err != nil {
		t.Fatal(err)
	}
	for i, tok := range gTokens {
		logits, err := s.Logits(0)
		if err != nil {
			t.Fatal(err)
		}
		max := float64(logits[0])
		for _, x := range logits {
			max = math.Max(max, float64(x))
		}
		sum := 0.0
		for _, x := range logits {
			sum += math.Exp(float64(x) - max)
		}
		chosen, top, err := g.Logprobs(i)
		if err != nil {
			t.Fatal(err)
		}
		want := float64(logits[tok]) - max - math.Log(sum)
		if chosen.Token != tok || math.Abs(float64(chosen.Logprob)-want) > 1e-4 {
			t.Fatalf("token %d: chosen %+v, want token %d logprob %g", i, chosen, tok, want)
		}
		if len(top) != 5 || top[0] != chosen {
			t.Fatalf("token %d: top %+v does not start with the greedy pick %+v", i, top, chosen)
		}
		for k := 1; k < len(top); k++ {
			if top[k].Logprob > top[k-1].Logprob {
				t.Fatalf("token %d: top not in order: %+v", i, top)
			}
		}
		if err := s.Decode(0, tok); err != nil {
			t.Fatal(err)
		}
	}
	if _, top, err := with.Logprobs(0); err != nil || len(top) != 0 {
		t.Fatalf("Logprobs alone: top %v, err %v", top, err)
	}
	if _, _, err := without.Logprobs(0); !errors.Is(err, StatusBadState) {
		t.Fatalf("a request without logprobs: err %v, want StatusBadState", err)
	}
	if _, _, err := g.Logprobs(len(gTokens)); !errors.Is(err, StatusInvalidArgument) {
		t.Fatalf("an index past the tokens: err %v, want StatusInvalidArgument", err)
	}
	if _, err := e.SubmitTokens(prompt, RequestOptions{TopLogprobs: MaxTopLogprobs + 1}); !errors.Is(err, StatusInvalidArgument) {
		t.Fatalf("TopLogprobs 21: err %v, want StatusInvalidArgument", err)
	}
}

// SubmitChat is ChatRender + Tokenize(ParseSpecial) + SubmitTokens in one call; a template
// error comes back from it.
func TestEngineSubmitChat(t *testing.T) {
	m := openModel(t)
	e := newEngine(t, m, EngineOptions{MaxSequences: 2})
	messages := []ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "The test is"}}
	text, err := m.ChatRender(messages, ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := m.Tokenize(text, ParseSpecial)
	if err != nil {
		t.Fatal(err)
	}
	greedy := GreedySampler()
	opts := RequestOptions{MaxTokens: 5, IgnoreEOS: true, Sampler: &greedy}
	byHand, err := e.SubmitTokens(ids, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer byHand.Close()
	chat, err := e.SubmitChat(messages, ChatOptions{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer chat.Close()
	ctx := context.Background()
	a, errA := collect(t, ctx, byHand)
	b, errB := collect(t, ctx, chat)
	if errA != nil || errB != nil || a != b {
		t.Fatalf("chat %q (%v) differs from rendering by hand %q (%v)", b, errB, a, errA)
	}
	if res, _ := chat.Result(); res.PromptTokens != len(ids) {
		t.Fatalf("prompt tokens %d, want %d", res.PromptTokens, len(ids))
	}
	if _, err := e.SubmitChat(messages, ChatOptions{Template: "{{ raise_exception('no chat') }}"}, opts); !errors.Is(err, StatusInvalidArgument) {
		t.Fatalf("a raising template: %v, want StatusInvalidArgument", err)
	}
}
