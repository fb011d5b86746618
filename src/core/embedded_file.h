// Links a file's bytes into the binary with the assembler's .incbin, so the program needs no
// data files at run time (the default model, the chat page):
//
//   DEEPINFER_EMBED_FILE(di_page, "/abs/path/page.html")   // at namespace scope, once
//   std::string_view(di_page_begin, di_page_end - di_page_begin)
//
// `path` is a string literal (absolute, set by CMake); a zero byte follows the data.
#pragma once

#define DEEPINFER_EMBED_FILE(symbol, path)                                                           \
  asm(".section .rodata\n.balign 16\n.global " #symbol "_begin\n" #symbol "_begin:\n.incbin \"" path \
      "\"\n.global " #symbol "_end\n" #symbol "_end:\n.byte 0\n.previous\n");                        \
  extern "C" const char symbol##_begin[];                                                            \
  extern "C" const char symbol##_end[];
