package replay

import "strings"

// words are common English words that the usual BPE tokenizers (Llama,
// Qwen, Mistral, GPT) encode as one token each when preceded by a space;
// token id x maps to words[x mod len(words)].
var words = strings.Fields(`
the of and to in is was for on are with as at be by this had not but from
or have an they which one you were her all she there would their we him been
has when who will more no if out so said what up its about into than them can
only other new some could time these two may then do first any my now such like
our over man me even most made after also did many before must through back years
where much your way well down should because each just those people how too little
state good very make world still own see men work long get here between both life
being under never day same another know while last might us great old year off
come since against go came right used take three states himself few house use during
without again place around however home small found thought went say part once general
high upon school every don does got united left number course war until always away
something fact though water less public put think almost hand enough far took head
yet government system better set told nothing night end why called based eyes find
going look asked later knew point next city give group toward young let room
side social present given several order national second possible rather per face among
form important often things looked early white case john become large big need four
within felt along children saw best church ever least power development light thing seemed
family interest want members mind country area others done turned although open god service
`)

// wordsText renders token ids as text for APIs that take only text (chat):
// each id x becomes the word words[x mod len(words)], separated by single spaces.
// The mapping is deterministic, so prompts that share a token-id prefix
// share a text prefix; with the common tokenizers each word is about one
// token, so the server's prompt length is close to (not exactly) the
// number of ids. The server's reported prompt_tokens and cached_tokens
// are what count in the metrics.
func wordsText(ids []int32) string {
	var b strings.Builder
	b.Grow(len(ids) * 6)
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[uint32(id)%uint32(len(words))])
	}
	return b.String()
}
