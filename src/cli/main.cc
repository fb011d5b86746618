#include <cstdio>

int main() {
  std::puts("deepinfer");
  return 0;
}
