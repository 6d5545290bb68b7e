package colibri_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"colibri.dev/colibri"
)

// Streaming generation with the callback form; errors carry the library's status and message.
func ExampleSession_Generate() {
	model, err := colibri.Open("model.colibri", colibri.WithLibrary("/opt/colibri/lib/libcolibri.so.1"))
	if errors.Is(err, colibri.StatusNotAnImage) {
		log.Fatalf("convert the checkpoint first: %v", err)
	} else if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	session, err := model.NewSession(colibri.SessionOptions{ContextLength: 2048})
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()
	res, err := session.Generate(context.Background(), "Once upon a time", colibri.GenerateOptions{MaxTokens: 64},
		func(piece string) error {
			fmt.Print(piece)
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("\n[%s, %d tokens]\n", res.FinishReason, res.GeneratedTokens)
}

// The pull form: the caller decides when to stop; Close cancels.
func ExampleSession_Stream() {
	model, err := colibri.Open("model.colibri")
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	session, err := model.NewSession(colibri.SessionOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()
	greedy := colibri.GreedySampler()
	stream, err := session.Stream("The capital of France is", colibri.GenerateOptions{Sampler: &greedy, StopStrings: []string{"\n"}})
	if err != nil {
		log.Fatal(err)
	}
	defer stream.Close()
	for {
		piece, ok, err := stream.Next()
		if err != nil {
			log.Fatal(err)
		}
		if !ok {
			break
		}
		fmt.Print(piece)
	}
}
