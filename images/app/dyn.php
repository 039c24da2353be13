<?php
// One dynamic request (004 §7.1): /dyn/QUERY/SIZE?k=KEY&w=WORK[&n=ROWS]
//   QUERY  point  one row of `items` by primary key (KEY mod DB_ROWS)
//          range  ROWS consecutive rows from there (an index range scan)
//          write  one row inserted into `writes` (POST), committed before the answer
//   SIZE   bytes of the response body, exactly
//   WORK   passes of SHA-256 over the body: computation proportional to the size, the same
//          for every request of that size (a deterministic cost, as in 004 §7.1)
// The body is the rows read (or the row written) followed by filler, cut to SIZE. Headers say
// what was done: X-Tierbench-Query (the load generators count successful writes from it) and
// X-Tierbench-Digest; Cache-Control: no-store keeps every cache (the proxy's) out of it.
// A database that does not answer gives 503 at once (connect timeout 2 s). Each worker keeps
// one persistent connection; after the database restarted, the first query on it fails: the
// connection is reset, a read is tried once more, a write is not (its first attempt may have
// committed), so at most one write request per worker fails after a restart. (PHP's own
// pgsql.auto_reset_persistent would send an extra `select 1` with every request.)

function fail(int $status, string $why): never
{
    http_response_code($status);
    header('Content-Type: text/plain');
    header('Cache-Control: no-store');
    echo $why, "\n";
    exit;
}

$path = parse_url($_SERVER['REQUEST_URI'] ?? '', PHP_URL_PATH) ?: '';
if (!preg_match('#^/dyn/(point|range|write)/([0-9]{1,9})$#', $path, $m)) {
    fail(404, 'expected /dyn/point|range|write/SIZE');
}
[$query, $size] = [$m[1], (int) $m[2]];
$key = (int) ($_GET['k'] ?? 0);
$work = max(0, (int) ($_GET['w'] ?? 1));
$span = max(1, (int) ($_GET['n'] ?? 10));
$rows = max(1, (int) getenv('DB_ROWS'));
if ($query === 'write' && ($_SERVER['REQUEST_METHOD'] ?? '') !== 'POST') {
    fail(405, 'a write is a POST');
}

$conn = @pg_pconnect(sprintf(
    "host=%s port=%s dbname=tierbench user=tierbench password='%s' connect_timeout=2 "
    . "options='-c statement_timeout=10000'",
    getenv('DB_HOST'), getenv('DB_PORT'), addcslashes((string) getenv('DB_PASSWORD'), "'\\")
));
if ($conn === false) {
    fail(503, 'the database does not answer');
}

/** The query's result, or false; a broken connection is reset (and a read tried again). */
function run($conn, string $sql, array $params, bool $retry)
{
    $res = @pg_query_params($conn, $sql, $params);
    if ($res === false && pg_connection_status($conn) !== PGSQL_CONNECTION_OK) {
        if (!@pg_connection_reset($conn) || !$retry) {
            return false;
        }
        $res = @pg_query_params($conn, $sql, $params);
    }
    return $res;
}

$filler = md5((string) $key);
if ($query === 'write') {
    $digest = hash('sha256', $key . ':' . $size);
    $res = run($conn, 'INSERT INTO writes (item, size, digest) VALUES ($1, $2, $3) RETURNING id',
               [$key % $rows + 1, $size, $digest], false);
    $head = $res === false ? false : 'written ' . pg_fetch_result($res, 0, 0) . ' ' . $digest;
} elseif ($query === 'range') {
    $first = $key % max(1, $rows - $span + 1) + 1;
    $res = run($conn, 'SELECT payload FROM items WHERE id >= $1 ORDER BY id LIMIT $2',
               [$first, $span], true);
    $head = $res === false ? false : implode('', pg_fetch_all_columns($res, 0));
} else {
    $res = run($conn, 'SELECT payload FROM items WHERE id = $1', [$key % $rows + 1], true);
    $head = $res === false ? false : (string) pg_fetch_result($res, 0, 0);
}
if ($head === false) {
    fail(503, 'the database query failed');
}

$body = substr($head, 0, $size);
if (strlen($body) < $size) {
    $body .= str_repeat($filler, intdiv($size - strlen($body), 32) + 1);
    $body = substr($body, 0, $size);
}
$ctx = hash_init('sha256');
for ($i = 0; $i < $work; $i++) {
    hash_update($ctx, $body);
}

header('Content-Type: application/octet-stream');
header('Cache-Control: no-store');
header('Content-Length: ' . $size);
header('X-Tierbench-Query: ' . $query);
header('X-Tierbench-Digest: ' . hash_final($ctx));
echo $body;
