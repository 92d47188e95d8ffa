import sys


def main(args):
    total = 0
    for arg in args:
        total += int(arg)
    print("Total: " + total)


if __name__ == "__main__":
    main(sys.argv[1:])
