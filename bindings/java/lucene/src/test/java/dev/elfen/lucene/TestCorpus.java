package dev.elfen.lucene;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

/** A tiny corpus with its manifest and index in a temporary directory. */
final class TestCorpus {
  final Path corpus;
  final Path index;
  final String buildLog;

  private TestCorpus(Path corpus, Path index, String buildLog) {
    this.corpus = corpus;
    this.index = index;
    this.buildLog = buildLog;
  }

  static List<Corpus.Doc> docs() {
    List<Corpus.Doc> out = new ArrayList<>();
    String[] words = {"search", "engine", "lucene", "index", "query", "latency", "batch", "lane"};
    for (int i = 0; i < 40; i++) {
      StringBuilder body = new StringBuilder("document number " + i);
      for (int w = 0; w < words.length; w++) {
        if (i % (w + 1) == 0) {
          body.append(' ').append(words[w]);
        }
      }
      out.add(new Corpus.Doc("t/" + i, i % 2 == 0 ? "gcide" : "wiki", "Title " + i, body.toString()));
    }
    return out;
  }

  /** Writes the corpus and its manifest into {@code dir} and builds the index there. */
  static TestCorpus build(Path dir) throws IOException {
    Path corpus = dir.resolve("docs.tsv");
    Corpus.write(corpus, docs());
    writeManifest(corpus, docs().size());
    Path index = dir.resolve("index");
    ByteArrayOutputStream log = new ByteArrayOutputStream();
    LuceneIndex.build(corpus, index, new PrintStream(log, true));
    return new TestCorpus(corpus, index, log.toString());
  }

  static void writeManifest(Path corpus, int docs) throws IOException {
    try {
      byte[] sha = MessageDigest.getInstance("SHA-256").digest(Files.readAllBytes(corpus));
      Files.writeString(corpus.resolveSibling("corpus.json"), "{\"format\": \"elfen-corpus-tsv-1\", \"docs\": "
          + docs + ", \"sha256\": \"" + HexFormat.of().formatHex(sha) + "\"}\n");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }
}
