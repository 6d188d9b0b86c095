std::string hello() {
  return "Hello World!";
}
