package providertest

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
)

// Images for tests of what a turn's images become on each wire: real,
// decodable files of each format mspd takes, small enough to read in a
// failure message's prefix.

// PNG is a w×h PNG of one colour.
func PNG(w, h int) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, solid(w, h)); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// JPEG is a w×h JPEG of one colour.
func JPEG(w, h int) []byte {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, solid(w, h), nil); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// GIF is a w×h GIF of one colour.
func GIF(w, h int) []byte {
	var b bytes.Buffer
	if err := gif.Encode(&b, solid(w, h), nil); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// WebP is a 1×1 lossless WebP (the standard library encodes none).
func WebP() []byte {
	b, err := base64.StdEncoding.DecodeString("UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA==")
	if err != nil {
		panic(err)
	}
	return b
}

// B64 is data in standard base64, as every API and MSP carry it.
func B64(data []byte) string { return base64.StdEncoding.EncodeToString(data) }

func solid(w, h int) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{R: 200, G: 40, B: 40, A: 255})
		}
	}
	return img
}
