// mt_ref.cpp - the C++ standard library's stream, for test_mt.c to compare
// src/sample/mt.c against: for each seed on the command line, the first
// 1000 raw outputs of std::mt19937, then 1000 draws of
// std::uniform_real_distribution<double>(0, 1) (the distribution llama.cpp
// samples with) from a fresh engine, one per line, doubles in %a.
#include <cstdio>
#include <cstdlib>
#include <random>

int main(int argc, char **argv)
{
    for (int a = 1; a < argc; a++) {
        unsigned long seed = std::strtoul(argv[a], nullptr, 0);
        std::mt19937 raw(static_cast<uint32_t>(seed));
        for (int i = 0; i < 1000; i++) std::printf("%u\n", static_cast<unsigned>(raw()));
        std::mt19937 eng(static_cast<uint32_t>(seed));
        std::uniform_real_distribution<double> dist(0.0f, 1.0f);
        for (int i = 0; i < 1000; i++) std::printf("%a\n", dist(eng));
    }
    return 0;
}
