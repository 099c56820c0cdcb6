/* words: counts words, vowels, digits and other characters of four lines (a switch on the
   lowered character, a struct passed by pointer), then 0!, 4!, 8!, 12! by recursion; exits with
   the number of words (18). Written as a new user would, to check what the others do not use. */
#include "sys.h"

struct stat { int words, vowels, digits, other; };

static const char *lines[] = {
    "the quick brown fox jumps over 13 lazy dogs",
    "  leading and trailing spaces  ",
    "RV32I: 47 instructions, 32 registers!",
    "",
};

static void count(const char *s, struct stat *st)
{
    int in_word = 0;
    for (; *s; s++) {
        char c = *s;
        switch (c | 32) {
        case 'a': case 'e': case 'i': case 'o': case 'u':
            st->vowels++;
            break;
        default:
            if (c >= '0' && c <= '9')
                st->digits++;
            else if (c != ' ')
                st->other++;
        }
        if (c == ' ')
            in_word = 0;
        else if (!in_word) {
            in_word = 1;
            st->words++;
        }
    }
}

static unsigned fact(unsigned n) { return n <= 1 ? 1 : n * fact(n - 1); }

int main(void)
{
    int total = 0;
    for (unsigned i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        struct stat st = {0, 0, 0, 0};
        count(lines[i], &st);
        print_int(st.words); print_char(' ');
        print_int(st.vowels); print_char(' ');
        print_int(st.digits); print_char(' ');
        print_int(st.other); print_char('\n');
        total += st.words;
    }
    for (unsigned n = 0; n <= 12; n += 4) {
        print_uint(fact(n)); print_char('\n');
    }
    return total;
}
