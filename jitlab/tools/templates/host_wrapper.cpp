// $signature
$returns ${fn}_py($params) {
  const char* fn = "$fn";
  $checks
  const int err = jitlab_call_$fn($args);
  if (err) host_failed(err, fn, $last_exception);
  $ret
}
