package dev.elfen.lucene;

import java.io.IOException;
import org.apache.lucene.index.IndexReader;
import org.apache.lucene.index.Term;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.TermQuery;
import org.apache.lucene.search.TopDocs;
import org.apache.lucene.search.TopScoreDocCollectorManager;

/**
 * One request's work: the top 10 documents by BM25 of a {@link TermQuery} on the body field,
 * on the calling thread (no executor, no query cache).
 *
 * <p>By default every matching document is scored and counted ({@code exactTotalHits}), as in
 * the Lucene of the paper, so a query's cost grows with its term's document frequency: that is
 * what makes the demand distribution long-tailed. With it off, Lucene skips blocks that cannot
 * reach the top 10 (block-max WAND) and frequent terms become cheap.
 */
public final class Search {
  /** Documents returned per query. */
  public static final int TOP_N = 10;

  private final IndexSearcher searcher;
  private final boolean exactTotalHits;
  private long lastTotalHits;

  /** A searcher over {@code reader}. */
  public Search(IndexReader reader, boolean exactTotalHits) {
    this.searcher = new IndexSearcher(reader);
    this.searcher.setQueryCache(null);
    this.exactTotalHits = exactTotalHits;
  }

  /** Runs the term query; returns the number of hits returned (at most {@link #TOP_N}). */
  public int run(String term) throws IOException {
    TermQuery q = new TermQuery(new Term(LuceneIndex.BODY, term));
    TopDocs td = searcher.search(q, new TopScoreDocCollectorManager(TOP_N,
        exactTotalHits ? Integer.MAX_VALUE : 1000));
    lastTotalHits = td.totalHits.value();
    return td.scoreDocs.length;
  }

  /** The total hit count of the last {@link #run} (a lower bound unless exact). */
  public long lastTotalHits() {
    return lastTotalHits;
  }
}
