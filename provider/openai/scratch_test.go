package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func TestScratch(t *testing.T) {
	for _, body := range []string{"<html>bad gateway</html>", "", `{"object":"error","message":"m","type":"BadRequestError","param":null,"code":400}`, `{"error":"plain"}`, `{"error":{"message":"x","type":"t","code":400}}`} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(502)
			w.Write([]byte(body))
		}))
		svc := oai.NewChatCompletionService(option.WithBaseURL(srv.URL), option.WithAPIKey("k"), option.WithMaxRetries(0), option.WithHTTPClient(srv.Client()))
		s := svc.NewStreaming(context.Background(), oai.ChatCompletionNewParams{Model: "m"})
		for s.Next() {
		}
		var ae *oai.Error
		fmt.Printf("%q -> %T %v as=%v\n", body, s.Err(), s.Err(), errors.As(s.Err(), &ae))
		if ae != nil {
			fmt.Printf("   code=%q type=%q msg=%q\n", ae.Code, ae.Type, ae.Message)
		}
		srv.Close()
	}
}
